//! The OpenAI-compatible HTTP API over the engine thread: `/v1/chat/completions`,
//! `/v1/completions`, `/v1/models`, `/metrics`, `/health`.
//!
//! Handlers only parse ([`ChatRequest::parse`], [`CompletionRequest::parse`]), template and
//! tokenize (on the blocking pool), then wait on the request's reply channel; the forward pass
//! runs on the engine thread, never on a tokio worker. A client that goes away drops its
//! receiver, which cancels the request in the scheduler. Every request is logged once, at info
//! level, when it is over. Connections are served by `shortlist_http::serve` (a client has the
//! header timeout of its [`Limits`] to send each request's headers) and bodies are read within
//! the same limits' size and time.

mod request;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, Json, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream::{self, Stream, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc::unbounded_channel;

use crate::engine::LoadedModel;
use crate::error::EngineError;
use crate::sampling::TokenLogprobs;
use crate::scheduler::{Completion, EngineHandle, Event, GenRequest};

pub use request::{ChatRequest, CompletionRequest, MAX_CHOICES, Options, Prompt};
pub use shortlist_http::Limits;

/// Shared state of the HTTP layer.
#[derive(Debug, Clone)]
pub struct AppState {
    engine: EngineHandle,
    limits: Limits,
}

static REQUEST_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The application as a value, so tests can call it in memory; request bodies are read within
/// the default [`Limits`].
pub fn router(engine: EngineHandle) -> Router {
    router_with_limits(engine, Limits::default())
}

/// [`router`] reading request bodies within `limits`.
pub fn router_with_limits(engine: EngineHandle, limits: Limits) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .fallback(not_found)
        .with_state(AppState { engine, limits })
}

/// An OpenAI-style error response: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    code: Option<&'static str>,
    param: Option<String>,
    message: String,
}

impl ApiError {
    fn bad_request(message: impl Into<String>, param: Option<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            code: None,
            param,
            message: message.into(),
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The response body, in OpenAI's error shape.
    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message, "type": self.kind, "param": self.param, "code": self.code,
        }})
    }
}

/// A request body read within the server's [`Limits`] (413, 408 or 400 in OpenAI's error
/// shape otherwise).
#[derive(Debug)]
struct RequestBody(Bytes);

impl FromRequest<AppState> for RequestBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, st: &AppState) -> Result<Self, ApiError> {
        shortlist_http::read_body(req.into_body(), &st.limits)
            .await
            .map(Self)
            .map_err(|e| ApiError {
                status: e.status(),
                kind: "invalid_request_error",
                code: None,
                param: None,
                message: e.to_string(),
            })
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match &e {
            EngineError::ContextLimit { .. } => Self {
                status: StatusCode::BAD_REQUEST,
                kind: "invalid_request_error",
                code: Some("context_length_exceeded"),
                param: Some("messages".to_owned()),
                message: e.to_string(),
            },
            EngineError::InvalidParameter { field, .. } => {
                Self::bad_request(e.to_string(), Some((*field).to_owned()))
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
        (self.status, Json(self.body())).into_response()
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

/// One request's log line, written once when the request is over: its response sent, its
/// stream finished, or its client gone (the value is then dropped with the stream).
#[derive(Debug)]
struct RequestLog {
    id: String,
    method: Method,
    route: String,
    arrival: Instant,
    status: StatusCode,
    prompt_tokens: usize,
    completion_tokens: usize,
    /// The finish reason, or how a stream ended early.
    finish: Option<&'static str>,
    /// Why the request failed, for error statuses.
    error: Option<String>,
}

impl RequestLog {
    fn new(headers: &HeaderMap, method: Method, route: impl Into<String>) -> Self {
        Self {
            id: request_id(headers),
            method,
            route: route.into(),
            arrival: Instant::now(),
            status: StatusCode::OK,
            prompt_tokens: 0,
            completion_tokens: 0,
            finish: None,
            error: None,
        }
    }

    fn failed(&mut self, e: &ApiError) {
        self.status = e.status;
        self.error = Some(e.message.clone());
    }

    fn done(&mut self, c: &Completion) {
        self.prompt_tokens = c.prompt_tokens;
        self.completion_tokens = c.completion_tokens;
        self.finish = Some(c.finish.as_str());
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        tracing::info!(
            request_id = %self.id,
            method = %self.method,
            route = %self.route,
            status = self.status.as_u16(),
            prompt_tokens = self.prompt_tokens,
            completion_tokens = self.completion_tokens,
            latency_ms = %format_args!("{:.1}", self.arrival.elapsed().as_secs_f64() * 1e3),
            finish = self.finish.map(tracing::field::display),
            error = self.error.as_deref(),
            "request"
        );
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Text,
}

impl Kind {
    fn route(self) -> &'static str {
        match self {
            Kind::Chat => "/v1/chat/completions",
            Kind::Text => "/v1/completions",
        }
    }
}

async fn chat_completions(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Result<RequestBody, ApiError>,
) -> Response {
    let log = RequestLog::new(&headers, Method::POST, Kind::Chat.route());
    let result = async {
        let (messages, options) = ChatRequest::parse(&body?.0)?.into_parts();
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
        let ready = Ready {
            ids: pre.0?,
            text: String::new(),
        };
        Ok::<_, ApiError>((vec![ready], (pre.1, pre.2), options))
    }
    .await;
    respond(st, log, Kind::Chat, result).await
}

async fn completions(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Result<RequestBody, ApiError>,
) -> Response {
    let log = RequestLog::new(&headers, Method::POST, Kind::Text.route());
    let result = async {
        let (prompts, options) = CompletionRequest::parse(&body?.0)?.into_parts();
        let model = st.engine.model().clone();
        let echo = options.echo();
        let pre = tokio::task::spawn_blocking(move || {
            let t0 = Instant::now();
            let ready: Result<Vec<Ready>, ApiError> = prompts
                .into_iter()
                .enumerate()
                .map(|(i, p)| Ready::of(&model, p, echo, i))
                .collect();
            (ready, t0, Instant::now())
        })
        .await
        .map_err(|e| ApiError::from(EngineError::Unavailable(e.to_string())))?;
        Ok::<_, ApiError>((pre.0?, (pre.1, pre.2), options))
    }
    .await;
    respond(st, log, Kind::Text, result).await
}

/// One prompt, ready for the engine: its ids and, for `echo`, its text.
struct Ready {
    ids: Vec<u32>,
    text: String,
}

impl Ready {
    /// Prompt `i` of a completions request, tokenized (text) or checked (token ids).
    fn of(model: &LoadedModel, prompt: Prompt, echo: bool, i: usize) -> Result<Self, ApiError> {
        match prompt {
            Prompt::Text(text) => Ok(Self {
                ids: model.encode_prompt(&text)?,
                text: if echo { text } else { String::new() },
            }),
            Prompt::Ids(ids) => {
                let vocab = model.model().vocab_size();
                if let Some(bad) = ids.iter().find(|&&t| t as usize >= vocab) {
                    return Err(ApiError::bad_request(
                        format!(
                            "request body: prompt {i} has token id {bad}, outside the model's \
                             vocabulary of {vocab} ids"
                        ),
                        Some("prompt".into()),
                    ));
                }
                let text = if echo {
                    model.tokenizer().decode(&ids)?
                } else {
                    String::new()
                };
                Ok(Self { ids, text })
            }
        }
    }
}

/// The prompts, the template + tokenization interval, and the request's options.
type Prepared = (Vec<Ready>, (Instant, Instant), Options);

/// Every choice's events, tagged with the choice's index (prompt `p`'s choice `i` is
/// `p × n + i`). Dropping it drops each choice's receiver, which cancels them in the scheduler.
type Choices = stream::SelectAll<stream::BoxStream<'static, (usize, Event)>>;

async fn respond(
    st: AppState,
    mut log: RequestLog,
    kind: Kind,
    prepared: Result<Prepared, ApiError>,
) -> Response {
    let rid = log.id.clone();
    let mut resp = match start(&st, &mut log, prepared) {
        Err(e) => {
            log.failed(&e);
            e.into_response()
        }
        Ok((events, options, prompts)) => {
            let id = match kind {
                Kind::Chat => format!("chatcmpl-{rid}"),
                Kind::Text => format!("cmpl-{rid}"),
            };
            let loaded = st.engine.model().clone();
            let reply = Reply {
                loaded,
                kind,
                options,
                prompts,
            };
            if reply.options.stream() {
                // The stream owns the log line from here and writes it when it ends.
                Sse::new(sse_stream(SseState::new(events, id, reply, log))).into_response()
            } else {
                collect(events, id, &reply, &mut log).await
            }
        }
    };
    if let Ok(v) = HeaderValue::from_str(&rid) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

/// Submits one request per choice: each prompt `n` times, choice `i` with the seed moved on
/// by `i`.
fn start(
    st: &AppState,
    log: &mut RequestLog,
    prepared: Result<Prepared, ApiError>,
) -> Result<(Choices, Options, Vec<Ready>), ApiError> {
    let (prompts, preprocess, options) = prepared?;
    log.prompt_tokens = prompts.iter().map(|p| p.ids.len()).sum();
    for p in &prompts {
        st.engine
            .model()
            .check_context(p.ids.len(), options.params().max_tokens())?;
    }
    let n = options.n();
    let mut choices = Vec::with_capacity(prompts.len() * n);
    for (pi, p) in prompts.iter().enumerate() {
        for i in 0..n {
            let index = pi * n + i;
            let (tx, rx) = unbounded_channel();
            st.engine.submit(GenRequest {
                id: if prompts.len() * n == 1 {
                    log.id.clone()
                } else {
                    format!("{}-{index}", log.id)
                },
                prompt: p.ids.clone(),
                params: options.params().clone().with_seed_offset(i as u64),
                arrival: log.arrival,
                preprocess,
                events: tx,
            })?;
            choices.push(
                stream::unfold(rx, move |mut rx| async move {
                    rx.recv().await.map(|ev| ((index, ev), rx))
                })
                .boxed(),
            );
        }
    }
    Ok((stream::select_all(choices), options, prompts))
}

/// What a reply needs besides the events: the model (token texts), the endpoint, the options
/// and the prompts (for `echo`).
struct Reply {
    loaded: std::sync::Arc<LoadedModel>,
    kind: Kind,
    options: Options,
    prompts: Vec<Ready>,
}

impl Reply {
    fn choices(&self) -> usize {
        self.prompts.len() * self.options.n()
    }

    /// The prompt of choice `k`.
    fn prompt(&self, k: usize) -> &Ready {
        &self.prompts[k / self.options.n()]
    }

    /// The response's `usage`: each prompt counted once (by its first choice), every choice's
    /// answer tokens.
    fn usage(&self, done: &[Option<Completion>]) -> Value {
        let n = self.options.n();
        let (mut prompt, mut answer, mut cached) = (0, 0, 0);
        for (k, c) in done.iter().enumerate() {
            let Some(c) = c else { continue };
            if k % n == 0 {
                prompt += c.prompt_tokens;
                cached += c.cached_tokens;
            }
            answer += self.answer_tokens(c);
        }
        json!({
            "prompt_tokens": prompt,
            "completion_tokens": answer,
            "total_tokens": prompt + answer,
            "prompt_tokens_details": {"cached_tokens": cached},
        })
    }

    /// Answer tokens of a finished choice: none when only the prompt was asked for.
    fn answer_tokens(&self, c: &Completion) -> usize {
        if self.options.prompt_only() {
            0
        } else {
            c.completion_tokens
        }
    }

    /// The finish reason of a finished choice (`max_tokens: 0` ends on its length).
    fn finish(&self, c: &Completion) -> &'static str {
        if self.options.prompt_only() {
            "length"
        } else {
            c.finish.as_str()
        }
    }
}

/// A token's text for log-probability entries: the token decoded alone (a byte-fallback piece
/// of a multi-byte character decodes to U+FFFD).
fn token_text(model: &LoadedModel, id: u32) -> String {
    model.tokenizer().decode(&[id]).unwrap_or_default()
}

/// One generated token in OpenAI's chat `logprobs.content` shape.
fn chat_logprob(model: &LoadedModel, id: u32, lp: &TokenLogprobs) -> Value {
    let entry = |id: u32, logprob: f32| {
        let token = token_text(model, id);
        json!({"token": token, "logprob": logprob, "bytes": token.as_bytes()})
    };
    let mut v = entry(id, lp.logprob);
    v["top_logprobs"] = lp.top.iter().map(|&(i, l)| entry(i, l)).collect();
    v
}

/// Tokens in the legacy completions `logprobs` shape, `text_offset` counting characters (as
/// OpenAI's and as a client's `len(text)` counts) from `start`. With `echo`, the prompt's tokens
/// come first: `prompt` holds their ids and the log-probabilities of all but the first, which has
/// none (`null`, as OpenAI's); a BOS token that the echoed text does not show takes no width.
/// `end` is the end-of-generation token the answer stopped at, listed last with no width (a
/// scoring client reads the last entry as the model's next token).
fn completion_logprobs(
    model: &LoadedModel,
    prompt: Option<(&Ready, &[TokenLogprobs])>,
    tokens: &[(u32, TokenLogprobs)],
    end: Option<&(u32, TokenLogprobs)>,
    start: usize,
) -> Value {
    let mut offset = start;
    let (mut texts, mut lps, mut tops, mut offsets) = (vec![], vec![], vec![], vec![]);
    let top_of = |lp: &TokenLogprobs| -> Value {
        Value::Object(
            lp.top
                .iter()
                .map(|&(i, l)| (token_text(model, i), json!(l)))
                .collect(),
        )
    };
    if let Some((ready, prompt_lps)) = prompt {
        for (j, &id) in ready.ids.iter().enumerate() {
            let text = token_text(model, id);
            offsets.push(offset);
            let unshown_bos = j == 0
                && Some(id) == model.tokenizer().bos()
                && !ready.text.starts_with(text.as_str());
            if !unshown_bos {
                offset += text.chars().count();
            }
            texts.push(text);
            let lp = j.checked_sub(1).and_then(|j| prompt_lps.get(j));
            lps.push(lp.map_or(Value::Null, |lp| json!(lp.logprob)));
            tops.push(lp.map_or(Value::Null, top_of));
        }
    }
    for (id, lp) in tokens {
        let text = token_text(model, *id);
        offsets.push(offset);
        offset += text.chars().count();
        texts.push(text);
        lps.push(json!(lp.logprob));
        tops.push(top_of(lp));
    }
    if let Some((id, lp)) = end {
        offsets.push(offset);
        texts.push(model.tokenizer().piece_text(Some(*id)));
        lps.push(json!(lp.logprob));
        tops.push(top_of(lp));
    }
    json!({"tokens": texts, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
}

/// One choice as its events arrive.
#[derive(Default)]
struct ChoiceState {
    text: String,
    logprobs: Vec<(u32, TokenLogprobs)>,
    end: Option<(u32, TokenLogprobs)>,
    prompt_logprobs: Vec<TokenLogprobs>,
    tokens: usize,
}

async fn collect(mut events: Choices, id: String, reply: &Reply, log: &mut RequestLog) -> Response {
    let loaded = &*reply.loaded;
    let model = loaded.name().to_owned();
    let total = reply.choices();
    let mut choices: Vec<ChoiceState> = (0..total).map(|_| ChoiceState::default()).collect();
    let mut done: Vec<Option<Completion>> = vec![None; total];
    let mut left = total;
    while left > 0 {
        let Some((k, ev)) = events.next().await else {
            let e = ApiError::from(EngineError::Unavailable(
                "the engine dropped the request".into(),
            ));
            log.failed(&e);
            return e.into_response();
        };
        let c = &mut choices[k];
        match ev {
            Event::Admitted { .. } => {}
            Event::PromptLogprobs(rows) => c.prompt_logprobs.extend(rows),
            Event::Token {
                id: tok,
                text: t,
                logprobs: lp,
            } => {
                c.tokens += 1;
                c.text.push_str(&t);
                if let Some(lp) = lp {
                    c.logprobs.push((tok, lp));
                }
            }
            Event::End { id, logprobs } => c.end = Some((id, logprobs)),
            Event::Failed(e) => {
                let e = ApiError::from(e);
                log.failed(&e);
                return e.into_response();
            }
            Event::Done(d) => {
                done[k] = Some(d);
                left -= 1;
            }
        }
    }
    let echo = reply.options.echo();
    let prompt_only = reply.options.prompt_only();
    let wants_logprobs = reply.options.params().logprobs().is_some();
    let mut out = Vec::with_capacity(total);
    for (k, (c, d)) in choices.iter().zip(&done).enumerate() {
        let Some(d) = d else { continue };
        let answer: &[(u32, TokenLogprobs)] = if prompt_only { &[] } else { &c.logprobs };
        let end = if prompt_only { None } else { c.end.as_ref() };
        let mut choice = match reply.kind {
            Kind::Chat => {
                let lps = wants_logprobs.then(|| {
                    json!({"content": answer
                        .iter()
                        .map(|(i, lp)| chat_logprob(loaded, *i, lp))
                        .collect::<Vec<_>>()})
                });
                json!({"index": k, "message": {"role": "assistant", "content": c.text}, "logprobs": lps, "finish_reason": reply.finish(d)})
            }
            Kind::Text => {
                let prompt = reply.prompt(k);
                let mut text = if echo {
                    prompt.text.clone()
                } else {
                    String::new()
                };
                if !prompt_only {
                    text.push_str(&c.text);
                }
                let lps = wants_logprobs.then(|| {
                    let echoed = echo.then_some((prompt, &c.prompt_logprobs[..]));
                    completion_logprobs(loaded, echoed, answer, end, 0)
                });
                json!({"index": k, "text": text, "logprobs": lps, "finish_reason": reply.finish(d)})
            }
        };
        if total > 1 {
            choice["shortlist_timings"] = json!(d.timings);
        }
        out.push(choice);
    }
    let first = done[0].as_ref().expect("every choice is done");
    log.done(first);
    log.completion_tokens = done.iter().flatten().map(|d| reply.answer_tokens(d)).sum();
    let object = if reply.kind == Kind::Chat {
        "chat.completion"
    } else {
        "text_completion"
    };
    Json(json!({
        "id": id, "object": object, "created": unix_now(), "model": model,
        "choices": out, "usage": reply.usage(&done), "shortlist_timings": first.timings,
    }))
    .into_response()
}

struct SseState {
    events: Choices,
    pending: VecDeque<SseEvent>,
    id: String,
    model: String,
    reply: Reply,
    /// Per choice: characters of text sent so far (the completions `text_offset`), whether the
    /// first chunk (the chat role, the echoed prompt) went out, the prompt's log-probabilities
    /// gathered for `echo`, and the finished request.
    sent_chars: Vec<usize>,
    started: Vec<bool>,
    prompt_logprobs: Vec<Vec<TokenLogprobs>>,
    finished: Vec<Option<Completion>>,
    done: bool,
    log: RequestLog,
}

impl SseState {
    fn new(events: Choices, id: String, reply: Reply, mut log: RequestLog) -> Self {
        // Until the stream ends by itself, the client went away.
        log.finish = Some("disconnected");
        let total = reply.choices();
        Self {
            events,
            pending: VecDeque::new(),
            id,
            model: reply.loaded.name().to_owned(),
            reply,
            sent_chars: vec![0; total],
            started: vec![false; total],
            prompt_logprobs: vec![Vec::new(); total],
            finished: vec![None; total],
            done: false,
            log,
        }
    }

    fn chunk_value(&self, k: usize, delta_text: Option<&str>, finish: Option<&str>) -> Value {
        let created = unix_now();
        match self.reply.kind {
            Kind::Chat => {
                let delta = match (delta_text, self.started[k]) {
                    (Some(t), true) => json!({"content": t}),
                    (Some(t), false) => json!({"role": "assistant", "content": t}),
                    (None, _) => json!({}),
                };
                json!({"id": self.id, "object": "chat.completion.chunk", "created": created, "model": self.model,
                       "choices": [{"index": k, "delta": delta, "finish_reason": finish}]})
            }
            Kind::Text => {
                json!({"id": self.id, "object": "text_completion", "created": created, "model": self.model,
                                 "choices": [{"index": k, "text": delta_text.unwrap_or(""), "logprobs": null, "finish_reason": finish}]})
            }
        }
    }

    fn push(&mut self, v: &Value) {
        self.pending
            .push_back(SseEvent::default().data(v.to_string()));
    }

    /// The echoed prompt of completion choice `k`, once, before its first answer text.
    fn echo(&mut self, k: usize) {
        if self.started[k] || !self.reply.options.echo() {
            return;
        }
        let prompt = self.reply.prompt(k);
        let mut e = self.chunk_value(k, Some(&prompt.text), None);
        if self.reply.options.params().logprobs().is_some() {
            let echoed = (prompt, &self.prompt_logprobs[k][..]);
            e["choices"][0]["logprobs"] =
                completion_logprobs(&self.reply.loaded, Some(echoed), &[], None, 0);
        }
        self.sent_chars[k] = prompt.text.chars().count();
        self.started[k] = true;
        self.push(&e);
    }

    fn on_event(&mut self, k: usize, ev: Event) {
        match ev {
            Event::Admitted { .. } => {}
            Event::PromptLogprobs(rows) => self.prompt_logprobs[k].extend(rows),
            Event::Token { id, text, logprobs } => {
                self.echo(k);
                if self.reply.options.prompt_only() {
                    return;
                }
                self.log.completion_tokens += 1;
                let loaded = &self.reply.loaded;
                let lps = logprobs.map(|lp| match self.reply.kind {
                    Kind::Chat => json!({"content": [chat_logprob(loaded, id, &lp)]}),
                    Kind::Text => {
                        completion_logprobs(loaded, None, &[(id, lp)], None, self.sent_chars[k])
                    }
                });
                if !text.is_empty() || !self.started[k] || lps.is_some() {
                    let mut e = self.chunk_value(k, Some(&text), None);
                    if let Some(lps) = lps {
                        e["choices"][0]["logprobs"] = lps;
                    }
                    self.started[k] = true;
                    self.push(&e);
                }
                self.sent_chars[k] += text.chars().count();
            }
            Event::End { id, logprobs } => {
                // Listed for completions only (chat's `logprobs.content` is the answer's
                // tokens), and not for a prompt-only request, whose answer is dropped.
                if self.reply.kind != Kind::Text || self.reply.options.prompt_only() {
                    return;
                }
                self.echo(k);
                let end = (id, logprobs);
                let lps = completion_logprobs(
                    &self.reply.loaded,
                    None,
                    &[],
                    Some(&end),
                    self.sent_chars[k],
                );
                let mut e = self.chunk_value(k, Some(""), None);
                e["choices"][0]["logprobs"] = lps;
                self.started[k] = true;
                self.push(&e);
            }
            Event::Done(c) => {
                self.echo(k);
                let mut last = self.chunk_value(k, None, Some(self.reply.finish(&c)));
                last["shortlist_timings"] = json!(c.timings);
                self.push(&last);
                self.finished[k] = Some(c);
                if self.finished.iter().all(Option::is_some) {
                    let first = self.finished[0].clone().expect("every choice is done");
                    self.log.done(&first);
                    self.log.completion_tokens = self
                        .finished
                        .iter()
                        .flatten()
                        .map(|d| self.reply.answer_tokens(d))
                        .sum();
                    if self.reply.options.include_usage() {
                        let object = if self.reply.kind == Kind::Chat {
                            "chat.completion.chunk"
                        } else {
                            "text_completion"
                        };
                        let u = json!({"id": self.id, "object": object, "created": unix_now(), "model": self.model,
                                       "choices": [], "usage": self.reply.usage(&self.finished)});
                        self.push(&u);
                    }
                    self.pending.push_back(SseEvent::default().data("[DONE]"));
                    self.done = true;
                }
            }
            Event::Failed(e) => {
                let e = ApiError::from(e);
                // The status line went out with the first byte; the log says how it ended.
                self.log.error = Some(e.message.clone());
                self.log.finish = Some("error");
                let v = json!({"error": {"message": e.message, "type": e.kind, "code": e.code}});
                self.push(&v);
                self.pending.push_back(SseEvent::default().data("[DONE]"));
                self.done = true;
            }
        }
    }
}

fn sse_stream(state: SseState) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    stream::unfold(state, |mut st| async move {
        loop {
            if let Some(e) = st.pending.pop_front() {
                return Some((Ok(e), st));
            }
            if st.done {
                return None;
            }
            match st.events.next().await {
                Some((k, ev)) => st.on_event(k, ev),
                None => {
                    st.on_event(
                        0,
                        Event::Failed(EngineError::Unavailable(
                            "the engine dropped the request".into(),
                        )),
                    );
                }
            }
        }
    })
}

async fn models(State(st): State<AppState>, headers: HeaderMap) -> Json<Value> {
    let _log = RequestLog::new(&headers, Method::GET, "/v1/models");
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

async fn metrics(State(st): State<AppState>, headers: HeaderMap) -> impl IntoResponse {
    let _log = RequestLog::new(&headers, Method::GET, "/metrics");
    (
        [("content-type", "text/plain; version=0.0.4")],
        st.engine.metrics().render(),
    )
}

async fn health(headers: HeaderMap) -> &'static str {
    let _log = RequestLog::new(&headers, Method::GET, "/health");
    "ok"
}

/// Any other path: an OpenAI-shaped 404 that lists the routes.
async fn not_found(method: Method, uri: Uri, headers: HeaderMap) -> Response {
    let mut log = RequestLog::new(&headers, method.clone(), uri.path());
    let e = ApiError {
        status: StatusCode::NOT_FOUND,
        kind: "invalid_request_error",
        code: Some("not_found"),
        param: None,
        message: format!(
            "no route {method} {}: this server answers POST /v1/chat/completions, \
             POST /v1/completions, GET /v1/models, GET /metrics and GET /health",
            uri.path()
        ),
    };
    log.failed(&e);
    e.into_response()
}

/// A listening socket with the runtime that will serve it. Binding comes first, so that a busy
/// or wrong address is reported at once, before a model is loaded for nothing.
#[derive(Debug)]
pub struct Listener {
    runtime: tokio::runtime::Runtime,
    listener: tokio::net::TcpListener,
    limits: Limits,
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
        Ok(Self {
            runtime,
            listener,
            limits: Limits::default(),
        })
    }

    /// Serve within `limits` instead of the default [`Limits`].
    #[must_use]
    pub fn with_limits(self, limits: Limits) -> Self {
        Self { limits, ..self }
    }

    /// The address bound (with the port chosen when port 0 was asked for).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve `engine` until `shutdown` resolves: then the listener closes, open responses are
    /// finished, and the engine thread ends once the last handle is dropped. A client must send
    /// each request's headers within the header timeout and its body within the body limits.
    pub fn serve_until(
        self,
        engine: EngineHandle,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let Self {
            runtime,
            listener,
            limits,
        } = self;
        runtime.block_on(async move {
            let app = router_with_limits(engine, limits);
            shortlist_http::serve(listener, app, &limits, shutdown).await;
        });
        Ok(())
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
