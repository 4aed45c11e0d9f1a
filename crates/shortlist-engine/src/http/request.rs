//! Request bodies of the OpenAI-compatible API, parsed into typed requests. A body that cannot be
//! served is refused with a 400 in OpenAI's error shape whose `param` is the field's path
//! (`messages[0].role`) and whose message says, in JSON's terms, what the field must be and what
//! was found, never a type of this server's code.

use serde_json::{Map, Value};

use super::ApiError;
use crate::chat::{Message, ROLES};
use crate::sampling::{MAX_TOP_LOGPROBS, SamplingParams};

/// A `/v1/chat/completions` body, checked.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    messages: Vec<Message>,
    options: Options,
}

/// A `/v1/completions` body, checked.
#[derive(Debug, Clone)]
pub struct CompletionRequest {
    prompts: Vec<Prompt>,
    options: Options,
}

/// One prompt of a completions request: text, or token ids taken as they are (no
/// beginning-of-sequence token added), as clients that tokenize for themselves send them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// Text, tokenized by the server.
    Text(String),
    /// Token ids.
    Ids(Vec<u32>),
}

/// What both endpoints share: sampling, choices and streaming.
#[derive(Debug, Clone)]
pub struct Options {
    params: SamplingParams,
    n: usize,
    echo: bool,
    prompt_only: bool,
    stream: bool,
    include_usage: bool,
}

/// The most choices one request may ask for (prompts × `n`).
pub const MAX_CHOICES: usize = 64;

/// New tokens when a chat request names no `max_tokens`.
const CHAT_DEFAULT_MAX_TOKENS: usize = 256;
/// New tokens when a completion request names no `max_tokens` (OpenAI's default).
const COMPLETION_DEFAULT_MAX_TOKENS: usize = 16;

impl ChatRequest {
    /// Parse a request body.
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let body = object(body)?;
        let messages = match field(&body, "messages") {
            None => return Err(missing("messages", "")),
            Some(Value::Array(items)) if items.is_empty() => {
                return Err(bad("messages", "`messages` must not be empty".into()));
            }
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, m)| message(m, &format!("messages[{i}]")))
                .collect::<Result<Vec<_>, _>>()?,
            Some(other) => {
                return Err(bad(
                    "messages",
                    format!(
                        "`messages` must be a list of messages, found {}",
                        found(other)
                    ),
                ));
            }
        };
        Ok(Self {
            messages,
            options: Options::parse(&body, CHAT_DEFAULT_MAX_TOKENS, true)?,
        })
    }

    /// The messages, in order.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Sampling and streaming.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The parts, for the handler.
    pub(super) fn into_parts(self) -> (Vec<Message>, Options) {
        (self.messages, self.options)
    }
}

impl CompletionRequest {
    /// Parse a request body.
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let body = object(body)?;
        let prompts = match field(&body, "prompt") {
            None => return Err(missing("prompt", "")),
            Some(v) => prompts(v)?,
        };
        let options = Options::parse(&body, COMPLETION_DEFAULT_MAX_TOKENS, false)?;
        if prompts.len() * options.n > MAX_CHOICES {
            return Err(bad(
                "n",
                format!(
                    "{} prompts × n = {} asks for {} choices; at most {MAX_CHOICES} per request",
                    prompts.len(),
                    options.n,
                    prompts.len() * options.n
                ),
            ));
        }
        Ok(Self { prompts, options })
    }

    /// The prompts, in order (choice `i` of prompt `p` is the response's choice `p × n + i`).
    pub fn prompts(&self) -> &[Prompt] {
        &self.prompts
    }

    /// Sampling and streaming.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The parts, for the handler.
    pub(super) fn into_parts(self) -> (Vec<Prompt>, Options) {
        (self.prompts, self.options)
    }
}

impl Options {
    fn parse(
        body: &Map<String, Value>,
        default_max_tokens: usize,
        chat: bool,
    ) -> Result<Self, ApiError> {
        let n = field(body, "n")
            .map(|v| positive_integer(v, "n"))
            .transpose()?
            .unwrap_or(1);
        if n > MAX_CHOICES {
            return Err(bad(
                "n",
                format!("{n} choices asked for; at most {MAX_CHOICES} per request"),
            ));
        }
        // Completions: `echo` puts the prompt before the answer (and, with `logprobs`, its
        // tokens' log-probabilities, as lm-evaluation-harness's loglikelihood tasks ask).
        let echo = !chat
            && field(body, "echo")
                .map(|v| boolean(v, "echo"))
                .transpose()?
                .unwrap_or(false);
        // `max_tokens: 0` with `echo` scores the prompt and generates nothing.
        let max_tokens = match field(body, "max_tokens") {
            Some(v) if echo && v.as_u64() == Some(0) => Some(0),
            Some(v) => Some(positive_integer(v, "max_tokens")?),
            None => None,
        };
        // OpenAI's newer name for the same limit wins when both are given.
        let max_completion_tokens = field(body, "max_completion_tokens")
            .map(|v| positive_integer(v, "max_completion_tokens"))
            .transpose()?;
        let temperature = field(body, "temperature")
            .map(|v| number(v, "temperature"))
            .transpose()?;
        let top_p = field(body, "top_p")
            .map(|v| number(v, "top_p"))
            .transpose()?;
        // `top_k` 0 or negative (vLLM's -1) means no cut.
        let top_k = field(body, "top_k")
            .map(|v| integer(v, "top_k"))
            .transpose()?
            .map_or(0, |k| usize::try_from(k).unwrap_or(0));
        // Any integer seeds: a negative one by its two's-complement bits.
        let seed = field(body, "seed")
            .map(|v| match (v.as_u64(), v.as_i64()) {
                (Some(s), _) => Ok(s),
                (None, Some(s)) => Ok(s as u64),
                _ => Err(must("seed", "an integer", v)),
            })
            .transpose()?;
        let stop = match field(body, "stop") {
            None => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    s.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| must(&format!("stop[{i}]"), "a string", s))
                })
                .collect::<Result<_, _>>()?,
            Some(other) => return Err(must("stop", "a string or a list of strings", other)),
        };
        let stream = field(body, "stream")
            .map(|v| boolean(v, "stream"))
            .transpose()?
            .unwrap_or(false);
        let include_usage = match field(body, "stream_options") {
            None => false,
            Some(Value::Object(o)) => field(o, "include_usage")
                .map(|v| boolean(v, "stream_options.include_usage"))
                .transpose()?
                .unwrap_or(false),
            Some(other) => return Err(must("stream_options", "an object", other)),
        };
        // vLLM's extensions that load tools send, so that a request generates the output
        // length its trace names.
        let ignore_eos = field(body, "ignore_eos")
            .map(|v| boolean(v, "ignore_eos"))
            .transpose()?
            .unwrap_or(false);
        let min_tokens = field(body, "min_tokens")
            .map(|v| whole(v, "min_tokens"))
            .transpose()?
            .unwrap_or(0);
        let logprobs = if chat {
            // Chat: `logprobs: true`, and `top_logprobs` alternatives (which need it).
            let on = field(body, "logprobs")
                .map(|v| boolean(v, "logprobs"))
                .transpose()?
                .unwrap_or(false);
            let top = field(body, "top_logprobs")
                .map(|v| whole(v, "top_logprobs"))
                .transpose()?;
            match (on, top) {
                (false, Some(_)) => {
                    return Err(bad(
                        "top_logprobs",
                        "`top_logprobs` needs `logprobs: true`".into(),
                    ));
                }
                (false, None) => None,
                (true, top) => Some(top.unwrap_or(0)),
            }
        } else {
            // Completions: `logprobs: N`, the alternatives per token (prompt tokens too with
            // `echo`).
            let top = field(body, "logprobs")
                .filter(|v| !v.is_null())
                .map(|v| whole(v, "logprobs"))
                .transpose()?;
            if let Some(n) = top.filter(|&n| n > MAX_TOP_LOGPROBS) {
                return Err(bad(
                    "logprobs",
                    format!("{n} alternatives asked for; at most {MAX_TOP_LOGPROBS}"),
                ));
            }
            top
        };
        let max_tokens = max_completion_tokens
            .or(max_tokens)
            .unwrap_or(default_max_tokens);
        // Nothing to generate: the engine still chooses the first answer token from the
        // prompt's last logits (no extra pass), and the handler leaves it out.
        let prompt_only = max_tokens == 0;
        let params = SamplingParams::new(
            temperature.unwrap_or(1.0) as f32,
            top_p.unwrap_or(1.0) as f32,
            top_k,
            seed.unwrap_or(0),
            max_tokens.max(1),
            stop,
        )?
        .with_min_tokens(min_tokens)?
        .with_ignore_eos(ignore_eos)
        .with_logprobs(logprobs)?
        .with_prompt_logprobs(if echo { logprobs } else { None })?;
        Ok(Self {
            params,
            n,
            echo,
            prompt_only,
            stream,
            include_usage,
        })
    }

    /// Choices per prompt (`n`); choice `i` samples with the seed moved on by `i`.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Whether the prompt comes back before the answer (completions' `echo`).
    pub fn echo(&self) -> bool {
        self.echo
    }

    /// Whether nothing is to be generated (`max_tokens: 0` with `echo`).
    pub fn prompt_only(&self) -> bool {
        self.prompt_only
    }

    /// How to sample, and when to stop.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Whether the answer is streamed as server-sent events.
    pub fn stream(&self) -> bool {
        self.stream
    }

    /// Whether a stream ends with a usage chunk (`stream_options.include_usage`).
    pub fn include_usage(&self) -> bool {
        self.include_usage
    }
}

/// The body as a JSON object.
fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "request body is empty: send a JSON object",
            None,
        ));
    }
    match serde_json::from_slice(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(ApiError::bad_request(
            format!(
                "request body must be a JSON object, found {}",
                found(&other)
            ),
            None,
        )),
        Err(e) => Err(ApiError::bad_request(
            format!("request body is not valid JSON: {e}"),
            None,
        )),
    }
}

/// The `prompt` field: a string, a list of strings, a list of token ids, or a list of lists of
/// token ids.
fn prompts(v: &Value) -> Result<Vec<Prompt>, ApiError> {
    let what = "a string, a list of strings, a list of token ids or a list of lists of token ids";
    let ids = |v: &Value, at: &str| -> Result<Vec<u32>, ApiError> {
        let Value::Array(items) = v else {
            return Err(must(at, "a list of token ids", v));
        };
        if items.is_empty() {
            return Err(bad(at, format!("`{at}` is an empty list of token ids")));
        }
        items
            .iter()
            .enumerate()
            .map(|(i, t)| {
                t.as_u64()
                    .and_then(|t| u32::try_from(t).ok())
                    .ok_or_else(|| must(&format!("{at}[{i}]"), "a token id", t))
            })
            .collect()
    };
    match v {
        Value::String(s) => Ok(vec![Prompt::Text(s.clone())]),
        Value::Array(items) if items.is_empty() => {
            Err(bad("prompt", "`prompt` is an empty list".into()))
        }
        Value::Array(items) if items[0].is_number() => Ok(vec![Prompt::Ids(ids(v, "prompt")?)]),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, p)| match p {
                Value::String(s) => Ok(Prompt::Text(s.clone())),
                Value::Array(_) => Ok(Prompt::Ids(ids(p, &format!("prompt[{i}]"))?)),
                other => Err(must(
                    &format!("prompt[{i}]"),
                    "a string or a list of token ids",
                    other,
                )),
            })
            .collect(),
        other => Err(must("prompt", what, other)),
    }
}

/// One chat message at `at` (`messages[i]`).
fn message(v: &Value, at: &str) -> Result<Message, ApiError> {
    let Value::Object(m) = v else {
        return Err(must(at, "an object with `role` and `content`", v));
    };
    let role_at = format!("{at}.role");
    let role = match field(m, "role") {
        None => return Err(missing("role", at)),
        Some(Value::String(r)) if ROLES.contains(&r.as_str()) => r.clone(),
        Some(other) => {
            return Err(bad(
                &role_at,
                format!(
                    "`{role_at}` is {}; the roles are {}",
                    found(other),
                    ROLES.join(", ")
                ),
            ));
        }
    };
    let content_at = format!("{at}.content");
    let content = match field(m, "content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(i, p)| text_part(p, &format!("{content_at}[{i}]")))
            .collect::<Result<String, _>>()?,
        Some(other) => return Err(must(&content_at, "a string or a list of text parts", other)),
        // OpenAI lets only an assistant message that calls tools leave its content out.
        None if role == "assistant" && calls_tools(m) => String::new(),
        None => {
            let what = if m.contains_key("content") {
                "is null"
            } else {
                "is missing"
            };
            return Err(bad(
                &content_at,
                format!(
                    "`{content_at}` {what}: only an assistant message with `tool_calls` may leave out its content"
                ),
            ));
        }
    };
    Ok(Message { role, content })
}

fn calls_tools(m: &Map<String, Value>) -> bool {
    match field(m, "tool_calls") {
        Some(Value::Array(calls)) => !calls.is_empty(),
        _ => field(m, "function_call").is_some_and(Value::is_object),
    }
}

/// One element of a content list: only `{"type": "text", "text": "…"}` parts are served.
fn text_part(p: &Value, at: &str) -> Result<String, ApiError> {
    let text_part = "a text part ({\"type\": \"text\", \"text\": \"…\"})";
    let Value::Object(part) = p else {
        return Err(must(at, text_part, p));
    };
    match (field(part, "type"), field(part, "text")) {
        (Some(Value::String(t)), Some(Value::String(text))) if t == "text" => Ok(text.clone()),
        (Some(Value::String(t)), _) if t != "text" => Err(bad(
            at,
            format!("`{at}` is a part of type {t:?}; this server takes text parts only"),
        )),
        _ => Err(must(at, text_part, p)),
    }
}

/// A field of an object; `null` counts as absent, as OpenAI's API treats optional fields.
fn field<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    map.get(key).filter(|v| !v.is_null())
}

fn positive_integer(v: &Value, at: &str) -> Result<usize, ApiError> {
    v.as_u64()
        .filter(|&n| n > 0)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| must(at, "a positive integer", v))
}

fn whole(v: &Value, at: &str) -> Result<usize, ApiError> {
    v.as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| must(at, "a whole number ≥ 0", v))
}

fn integer(v: &Value, at: &str) -> Result<i64, ApiError> {
    v.as_i64().ok_or_else(|| must(at, "an integer", v))
}

fn number(v: &Value, at: &str) -> Result<f64, ApiError> {
    v.as_f64().ok_or_else(|| must(at, "a number", v))
}

fn boolean(v: &Value, at: &str) -> Result<bool, ApiError> {
    v.as_bool().ok_or_else(|| must(at, "true or false", v))
}

fn bad(param: &str, message: String) -> ApiError {
    ApiError::bad_request(format!("request body: {message}"), Some(param.to_owned()))
}

/// "`at` must be `what`, found …".
fn must(at: &str, what: &str, v: &Value) -> ApiError {
    bad(at, format!("`{at}` must be {what}, found {}", found(v)))
}

/// A required field `key` of the object at `at` (empty: the body itself) is absent or null.
fn missing(key: &str, at: &str) -> ApiError {
    let (param, message) = if at.is_empty() {
        (key.to_owned(), format!("missing field `{key}`"))
    } else {
        (
            format!("{at}.{key}"),
            format!("missing field `{key}` in `{at}`"),
        )
    };
    bad(&param, message)
}

/// A JSON value as the caller wrote it, shortened: what was found where something else belongs.
fn found(v: &Value) -> String {
    const LONGEST: usize = 40;
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if s.chars().count() > LONGEST => {
            let head: String = s.chars().take(LONGEST).collect();
            format!("{:?}", format!("{head}…"))
        }
        Value::String(s) => format!("{s:?}"),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}
