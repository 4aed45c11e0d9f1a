//! `shortlist mock serve`: an OpenAI-compatible server that streams a configurable number of
//! tokens at a configurable speed, for calibration and tests. It does no inference.
//!
//! With canned answers ([`Answers`], `mock serve --answers FILE`) it answers chat requests whose
//! last user message contains an entry's `match` with that entry's content and tool calls — or
//! with the HTTP error it names — so a quality run against it has real passes, failures and
//! errors without a model.
//!
//! Chat streams open with a role-only chunk sent at once, as real servers do, so a client that
//! stamps TTFT on the first event is caught: the first *token* comes `ttft` later.
//!
//! Hostile clients are held to the same [`Limits`] as the engine's: each request's headers within
//! the header timeout, a body of at most the size limit within the body timeout (413 / 408 in
//! OpenAI's error shape otherwise), and a body that is not JSON is a 400.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream;
pub use shortlist_http::Limits;

/// The longest answer the mock sends, in tokens (its "context").
pub const MAX_ANSWER_TOKENS: u64 = 1 << 16;

/// How the mock answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MockConfig {
    /// Tokens per answer (fewer when the request's `max_tokens` asks for fewer).
    pub tokens: u32,
    /// Time to the first token.
    pub ttft: Duration,
    /// Gap between tokens.
    pub itl: Duration,
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            tokens: 16,
            ttft: Duration::ZERO,
            itl: Duration::ZERO,
        }
    }
}

/// One canned answer.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CannedAnswer {
    /// Text the last user message must contain.
    #[serde(rename = "match")]
    pub pattern: String,
    /// The answer's text.
    #[serde(default)]
    pub content: String,
    /// Tool calls: `{"name": ..., "arguments": {...}}`.
    #[serde(default)]
    pub tool_calls: Vec<serde_json::Value>,
    /// Answer with this HTTP status instead (an error outside the model).
    #[serde(default)]
    pub status: Option<u16>,
    /// The error message of an error status.
    #[serde(default)]
    pub error: Option<String>,
}

/// Canned answers, tried in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answers(Vec<CannedAnswer>);

impl Answers {
    /// Parse JSON lines of [`CannedAnswer`]s (blank lines and a `{"format": ...}` header are
    /// skipped); `source` names the file in errors, with the line.
    pub fn from_jsonl(source: &str, text: &str) -> Result<Answers, crate::LoadgenError> {
        let mut answers = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let value: serde_json::Value = serde_json::from_str(line).map_err(|e| {
                crate::LoadgenError::option(
                    "--answers",
                    format!("{source}:{}: not JSON: {e}", i + 1),
                )
            })?;
            if value.get("format").is_some() {
                continue;
            }
            let answer: CannedAnswer = serde_json::from_value(value).map_err(|e| {
                crate::LoadgenError::option("--answers", format!("{source}:{}: {e}", i + 1))
            })?;
            if answer.pattern.is_empty() {
                return Err(crate::LoadgenError::option(
                    "--answers",
                    format!(
                        "{source}:{}: `match` is empty: it would match every request",
                        i + 1
                    ),
                ));
            }
            answers.push(answer);
        }
        Ok(Answers(answers))
    }

    /// The first answer whose pattern the request's last user message contains.
    fn find(&self, request: &serde_json::Value) -> Option<&CannedAnswer> {
        let last_user = request
            .get("messages")?
            .as_array()?
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(|r| r.as_str()) == Some("user"))?
            .get("content")?
            .as_str()?;
        self.0.iter().find(|a| last_user.contains(&a.pattern))
    }

    /// How many answers there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What the mock's handlers share.
#[derive(Debug, Clone)]
struct MockState {
    config: MockConfig,
    answers: std::sync::Arc<Answers>,
    limits: Limits,
}

/// A request body read within the mock's [`Limits`].
#[derive(Debug)]
struct RequestBody(Bytes);

impl FromRequest<MockState> for RequestBody {
    type Rejection = Response;

    async fn from_request(req: Request, st: &MockState) -> Result<Self, Response> {
        shortlist_http::read_body(req.into_body(), &st.limits)
            .await
            .map(Self)
            .map_err(|e| error(e.status(), &e.to_string()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Completions,
}

/// The mock's routes: `POST /v1/chat/completions`, `POST /v1/completions`, `GET /v1/models`,
/// `GET /health`.
pub fn router(config: MockConfig) -> Router {
    router_with(config, Answers::default())
}

/// [`router`] with canned answers.
pub fn router_with(config: MockConfig, answers: Answers) -> Router {
    router_limited(config, answers, Limits::default())
}

/// [`router_with`], reading request bodies within `limits`.
pub fn router_limited(config: MockConfig, answers: Answers, limits: Limits) -> Router {
    Router::new()
        .route(
            "/v1/chat/completions",
            post(|s: State<MockState>, b: RequestBody| answer(s, b.0, Kind::Chat)),
        )
        .route(
            "/v1/completions",
            post(|s: State<MockState>, b: RequestBody| answer(s, b.0, Kind::Completions)),
        )
        .route("/v1/models", get(models))
        .route("/health", get(|| async { "ok" }))
        .with_state(MockState {
            config,
            answers: std::sync::Arc::new(answers),
            limits,
        })
}

/// Serve on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: MockConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, config, Answers::default(), shutdown).await
}

/// [`serve`] with canned answers.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    config: MockConfig,
    answers: Answers,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_limited(listener, config, answers, Limits::default(), shutdown).await
}

/// [`serve_with`] within `limits`: then the listener closes, open responses are finished, and it
/// returns once every connection has closed.
pub async fn serve_limited(
    listener: tokio::net::TcpListener,
    config: MockConfig,
    answers: Answers,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router_limited(config, answers, limits);
    shortlist_http::serve(listener, app, &limits, shutdown).await;
    Ok(())
}

/// Start the mock on a free loopback port of the current runtime; it stops when the returned
/// sender is dropped or sent to.
pub async fn spawn_local(
    config: MockConfig,
) -> std::io::Result<(SocketAddr, tokio::sync::oneshot::Sender<()>)> {
    spawn_at("127.0.0.1:0", config, Answers::default()).await
}

/// Start the mock with canned answers at `addr` (port 0: a free one) on the current runtime; it
/// stops when the returned sender is dropped or sent to.
pub async fn spawn_at(
    addr: &str,
    config: MockConfig,
    answers: Answers,
) -> std::io::Result<(SocketAddr, tokio::sync::oneshot::Sender<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let address = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = serve_with(listener, config, answers, async move {
            let _ = stopped.await;
        })
        .await;
    });
    Ok((address, stop))
}

async fn models() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        r#"{"object":"list","data":[{"id":"mock","object":"model","owned_by":"shortlist"}]}"#,
    )
}

fn error(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({"error": {"message": message, "type": "invalid_request_error"}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The mock's answer word at `index`: short words, one token each in common tokenizers.
fn word(index: u32) -> &'static str {
    if index == 0 { "Hello" } else { " tok" }
}

/// The mock's log-probabilities of its token at `index`, in `kind`'s shape: fixed values (the
/// chosen word −0.1, its k-th alternative ` alt{k}` −(3 + k)), so that clients that ask for
/// logprobs get the fields they parse.
fn mock_logprobs(kind: Kind, index: u32, top: usize, offset: usize) -> serde_json::Value {
    let alternatives = (1..top).map(|k| (format!(" alt{k}"), -(3.0 + k as f64)));
    let chosen = (word(index).to_owned(), -0.1);
    match kind {
        Kind::Chat => {
            let entry = |(t, lp): (String, f64)| serde_json::json!({"token": t, "logprob": lp, "bytes": t.as_bytes()});
            let top: Vec<_> = std::iter::once(chosen.clone())
                .chain(alternatives)
                .take(top)
                .map(entry)
                .collect();
            let mut e = entry(chosen);
            e["top_logprobs"] = serde_json::Value::Array(top);
            e
        }
        Kind::Completions => {
            let top: serde_json::Map<_, _> = std::iter::once(chosen.clone())
                .chain(alternatives)
                .take(top)
                .map(|(t, lp)| (t, serde_json::json!(lp)))
                .collect();
            serde_json::json!({"tokens": [chosen.0], "token_logprobs": [chosen.1], "top_logprobs": [top], "text_offset": [offset]})
        }
    }
}

/// Puts the prompt's words (`echo`) before the answer's tokens of a completions `logprobs`
/// object: each word a token (a space before all but the first), the first without a
/// log-probability, the others with the answer's fixed values; the answer's offsets move on by
/// the prompt's length.
fn echo_logprobs(lp: &mut serde_json::Value, prompt: &str, top: usize) {
    use serde_json::Value;
    let (mut tokens, mut lps, mut tops, mut offsets) = (vec![], vec![], vec![], vec![]);
    let mut offset = 0;
    for (i, w) in prompt.split_whitespace().enumerate() {
        let t = if i == 0 {
            w.to_owned()
        } else {
            format!(" {w}")
        };
        offsets.push(Value::from(offset));
        offset += t.len();
        if i == 0 {
            lps.push(Value::Null);
            tops.push(Value::Null);
        } else {
            let alternatives = (1..top).map(|k| (format!(" alt{k}"), -(3.0 + k as f64)));
            let top_map: serde_json::Map<_, _> = std::iter::once((t.clone(), -0.1))
                .chain(alternatives)
                .take(top)
                .map(|(t, lp)| (t, serde_json::json!(lp)))
                .collect();
            lps.push(serde_json::json!(-0.1));
            tops.push(Value::Object(top_map));
        }
        tokens.push(Value::String(t));
    }
    let shift = prompt.len();
    let mut prepend = |name: &str, mut head: Vec<Value>, shift: usize| {
        let tail = lp[name].as_array().cloned().unwrap_or_default();
        head.extend(tail.into_iter().map(|v| match v.as_u64() {
            Some(o) if shift > 0 => Value::from(o as usize + shift),
            _ => v,
        }));
        lp[name] = Value::Array(head);
    };
    prepend("tokens", tokens, 0);
    prepend("token_logprobs", lps, 0);
    prepend("top_logprobs", tops, 0);
    prepend("text_offset", offsets, shift);
}

/// The logprobs a request asks for: chat's `logprobs: true` with `top_logprobs`, or the
/// completions' `logprobs: N`.
fn asked_logprobs(kind: Kind, request: &serde_json::Value) -> Option<usize> {
    let top = |v: Option<&serde_json::Value>| {
        v.and_then(serde_json::Value::as_u64)
            .map_or(0, |n| n.min(20) as usize)
    };
    match kind {
        Kind::Chat => (request.get("logprobs").and_then(serde_json::Value::as_bool) == Some(true))
            .then(|| top(request.get("top_logprobs"))),
        Kind::Completions => request
            .get("logprobs")
            .filter(|v| v.is_u64())
            .map(|v| top(Some(v))),
    }
}

fn token_chunk_with_logprobs(kind: Kind, index: u32, top: usize, offset: usize) -> String {
    let lp = mock_logprobs(kind, index, top, offset);
    let v = match kind {
        Kind::Chat => {
            serde_json::json!({"id": "mock", "object": "chat.completion.chunk", "model": "mock", "choices": [{"index": 0, "delta": {"content": word(index)}, "logprobs": {"content": [lp]}, "finish_reason": null}]})
        }
        Kind::Completions => {
            serde_json::json!({"id": "mock", "object": "text_completion", "model": "mock", "choices": [{"index": 0, "text": word(index), "logprobs": lp, "finish_reason": null}]})
        }
    };
    format!("data: {v}\n\n")
}

fn token_chunk(kind: Kind, index: u32) -> String {
    let word = word(index);
    match kind {
        Kind::Chat => format!(
            "data: {{\"id\":\"mock\",\"object\":\"chat.completion.chunk\",\"model\":\"mock\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{word}\"}},\"finish_reason\":null}}]}}\n\n"
        ),
        Kind::Completions => format!(
            "data: {{\"id\":\"mock\",\"object\":\"text_completion\",\"model\":\"mock\",\"choices\":[{{\"index\":0,\"text\":\"{word}\",\"finish_reason\":null}}]}}\n\n"
        ),
    }
}

fn closing(kind: Kind, usage: Option<(u64, u32)>) -> String {
    let finish = match kind {
        Kind::Chat => {
            "data: {\"id\":\"mock\",\"object\":\"chat.completion.chunk\",\"model\":\"mock\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"
        }
        Kind::Completions => {
            "data: {\"id\":\"mock\",\"object\":\"text_completion\",\"model\":\"mock\",\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}]}\n\n"
        }
    };
    let mut text = finish.to_owned();
    if let Some((prompt, completion)) = usage {
        text.push_str(&format!(
            "data: {{\"id\":\"mock\",\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{completion},\"total_tokens\":{}}}}}\n\n",
            prompt + u64::from(completion)
        ));
    }
    text.push_str("data: [DONE]\n\n");
    text
}

/// A canned answer as OpenAI's non-streaming or streaming chat shape.
fn canned(canned: &CannedAnswer, streaming: bool) -> Response {
    if let Some(status) = canned.status {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return error(status, canned.error.as_deref().unwrap_or("canned error"));
    }
    let tool_calls: Vec<serde_json::Value> = canned
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            serde_json::json!({
                "id": format!("call_{i}"), "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"].to_string()},
            })
        })
        .collect();
    let finish = if tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let completion = canned.content.split_whitespace().count().max(1);
    if !streaming {
        let mut message = serde_json::json!({"role": "assistant", "content": canned.content});
        if !tool_calls.is_empty() {
            message["tool_calls"] = serde_json::Value::Array(tool_calls);
        }
        let body = serde_json::json!({
            "id": "mock", "model": "mock",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1, "completion_tokens": completion, "total_tokens": completion + 1},
        });
        return (
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response();
    }
    let mut text = String::new();
    for word in canned.content.split_inclusive(' ') {
        let chunk = serde_json::json!({"id": "mock", "object": "chat.completion.chunk", "model": "mock",
            "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": null}]});
        text.push_str(&format!("data: {chunk}\n\n"));
    }
    let last = serde_json::json!({"id": "mock", "object": "chat.completion.chunk", "model": "mock",
        "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]});
    text.push_str(&format!("data: {last}\n\ndata: [DONE]\n\n"));
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from(text))
        .unwrap_or_else(|_| error(StatusCode::INTERNAL_SERVER_ERROR, "response build failed"))
}

async fn answer(State(state): State<MockState>, body: Bytes, kind: Kind) -> Response {
    let config = state.config;
    let Ok(request) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    if kind == Kind::Chat
        && let Some(c) = state.answers.find(&request)
    {
        let streaming = request
            .get("stream")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
        // A canned answer takes the configured time to first token, as a model would.
        if !config.ttft.is_zero() {
            tokio::time::sleep(config.ttft).await;
        }
        return canned(c, streaming);
    }
    // The mock's "model" ends its answer after `config.tokens` tokens, as a model ends on its
    // end-of-generation token; vLLM's `ignore_eos` runs it to `max_tokens` and `min_tokens`
    // sets a floor, so that a load run gets the output lengths its trace names.
    let max_tokens = request
        .get("max_completion_tokens")
        .or_else(|| request.get("max_tokens"))
        .and_then(serde_json::Value::as_u64);
    let ignore_eos = request
        .get("ignore_eos")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    let min_tokens = request
        .get("min_tokens")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    let natural = u64::from(config.tokens).max(min_tokens);
    let asked = match max_tokens {
        Some(n) if ignore_eos => n,
        Some(n) => n.min(natural),
        None => natural,
    };
    if asked > MAX_ANSWER_TOKENS {
        return error(
            StatusCode::BAD_REQUEST,
            &format!("the mock answers at most {MAX_ANSWER_TOKENS} tokens; {asked} were asked for"),
        );
    }
    let asked = asked as u32;
    let prompt_tokens = match kind {
        Kind::Chat => request
            .get("messages")
            .and_then(|m| m.as_array())
            .map_or(0, |messages| {
                messages
                    .iter()
                    .filter_map(|m| m.get("content")?.as_str())
                    .map(|c| c.split_whitespace().count() as u64)
                    .sum()
            }),
        Kind::Completions => request
            .get("prompt")
            .and_then(|p| p.as_str())
            .map_or(0, |p| p.split_whitespace().count() as u64),
    };
    let streaming = request
        .get("stream")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    let logprobs = asked_logprobs(kind, &request);
    // `n` copies of the answer (the mock's model has one answer), and completions' `echo`: the
    // prompt before it, its words as tokens with the same fixed log-probabilities (the first
    // has none).
    let n = request
        .get("n")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(1);
    let echo = kind == Kind::Completions
        && request
            .get("echo")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
    if !(1..=64).contains(&n) {
        return error(
            StatusCode::BAD_REQUEST,
            &format!("n is {n}; 1 to 64 choices"),
        );
    }
    if streaming && (n > 1 || echo) {
        return error(
            StatusCode::BAD_REQUEST,
            "the mock streams one choice without echo; ask for n > 1 or echo without streaming",
        );
    }
    if !streaming {
        let prompt = request
            .get("prompt")
            .and_then(|p| p.as_str())
            .unwrap_or_default();
        let answer: String = (0..asked).map(word).collect();
        let text = if echo {
            format!("{prompt}{answer}")
        } else {
            answer
        };
        let mut choice = match kind {
            Kind::Chat => {
                serde_json::json!({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"})
            }
            Kind::Completions => {
                serde_json::json!({"index": 0, "text": text, "finish_reason": "length"})
            }
        };
        if let Some(top) = logprobs {
            let mut offset = 0;
            let per_token: Vec<serde_json::Value> = (0..asked)
                .map(|i| {
                    let lp = mock_logprobs(kind, i, top, offset);
                    offset += word(i).len();
                    lp
                })
                .collect();
            choice["logprobs"] = match kind {
                Kind::Chat => serde_json::json!({"content": per_token}),
                Kind::Completions => {
                    let field = |name: &str| -> Vec<serde_json::Value> {
                        per_token.iter().map(|lp| lp[name][0].clone()).collect()
                    };
                    let mut lp = serde_json::json!({"tokens": field("tokens"), "token_logprobs": field("token_logprobs"), "top_logprobs": field("top_logprobs"), "text_offset": field("text_offset")});
                    if echo {
                        echo_logprobs(&mut lp, prompt, top);
                    }
                    lp
                }
            };
        }
        let choices: Vec<serde_json::Value> = (0..n)
            .map(|k| {
                let mut c = choice.clone();
                c["index"] = k.into();
                c
            })
            .collect();
        let answered = n * u64::from(asked);
        let body = serde_json::json!({
            "id": "mock", "model": "mock", "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": answered, "total_tokens": prompt_tokens + answered},
        });
        return (
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response();
    }
    let include_usage = request
        .pointer("/stream_options/include_usage")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    let usage = include_usage.then_some((prompt_tokens, asked));
    let role = match kind {
        Kind::Chat => {
            "data: {\"id\":\"mock\",\"object\":\"chat.completion.chunk\",\"model\":\"mock\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
        }
        Kind::Completions => "",
    };
    let body = if config.ttft.is_zero() && config.itl.is_zero() {
        // No delays: one write, so the mock costs as little as possible during calibration.
        let mut text = role.to_owned();
        let mut offset = 0;
        for i in 0..asked {
            match logprobs {
                Some(top) => text.push_str(&token_chunk_with_logprobs(kind, i, top, offset)),
                None => text.push_str(&token_chunk(kind, i)),
            }
            offset += word(i).len();
        }
        text.push_str(&closing(kind, usage));
        Body::from(text)
    } else {
        // Step 0 sends the role chunk; steps 1..=asked send tokens after their delay; the last
        // step closes the stream.
        let steps = stream::unfold(0_u32, move |step| async move {
            if step > asked + 1 {
                return None;
            }
            let piece = if step == 0 {
                role.to_owned()
            } else if step <= asked {
                let delay = if step == 1 { config.ttft } else { config.itl };
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                let i = step - 1;
                match logprobs {
                    // Every word before this one is " tok" but the first, "Hello".
                    Some(top) => {
                        let offset = if i == 0 { 0 } else { 5 + 4 * (i as usize - 1) };
                        token_chunk_with_logprobs(kind, i, top, offset)
                    }
                    None => token_chunk(kind, i),
                }
            } else {
                closing(kind, usage)
            };
            Some((Ok::<_, std::convert::Infallible>(piece), step + 1))
        });
        Body::from_stream(steps)
    };
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .unwrap_or_else(|_| error(StatusCode::INTERNAL_SERVER_ERROR, "response build failed"))
}

/// A bound listening socket for [`serve`].
pub type Listener = tokio::net::TcpListener;

/// Bind `addr` (`HOST:PORT`; port 0 picks a free one).
pub async fn bind(addr: &str) -> std::io::Result<Listener> {
    tokio::net::TcpListener::bind(addr).await
}
