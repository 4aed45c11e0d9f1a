//! Candidates a quality run can drive: a local GGUF model on the engine, or an OpenAI-compatible
//! endpoint (vLLM, SGLang, TGI, llama.cpp server, `shortlist engine serve`).

mod engine;

use std::path::PathBuf;
use std::time::Instant;

use serde_json::{Value, json};

pub use self::engine::EngineGenerator;
use crate::error::RunError;
use crate::prompt::ChatRequest;

/// Where a candidate runs.
#[derive(Debug, Clone, PartialEq)]
pub enum CandidateSpec {
    /// A GGUF file on the local engine.
    Gguf(PathBuf),
    /// An OpenAI-compatible endpoint (`http://host:port`, with or without `/v1`) and model name.
    Endpoint { url: String, model: String },
}

impl CandidateSpec {
    /// Parse `gguf:PATH`, a `*.gguf` path, or `http(s)://URL[#MODEL]`.
    pub fn parse(spec: &str) -> Result<CandidateSpec, RunError> {
        if let Some(path) = spec.strip_prefix("gguf:") {
            return Ok(CandidateSpec::Gguf(PathBuf::from(path)));
        }
        if spec.starts_with("http://") || spec.starts_with("https://") {
            let (url, model) = spec.split_once('#').unwrap_or((spec, "default"));
            let url = url.trim_end_matches('/').trim_end_matches("/v1").to_owned();
            return Ok(CandidateSpec::Endpoint {
                url,
                model: model.to_owned(),
            });
        }
        if spec.ends_with(".gguf") {
            return Ok(CandidateSpec::Gguf(PathBuf::from(spec)));
        }
        Err(RunError::Candidate {
            spec: spec.to_owned(),
            why:
                "expected gguf:PATH, a .gguf file, or an http(s):// endpoint (optionally URL#MODEL)"
                    .to_owned(),
        })
    }
}

/// Decoding settings of a quality run.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoding {
    pub max_tokens: usize,
    /// `None`: greedy (deterministic). `Some((temperature, seed))`: seeded sampling.
    pub sampling: Option<(f32, u64)>,
}

impl Decoding {
    /// A one-line description for results.
    pub fn describe(&self) -> String {
        match self.sampling {
            None => format!("greedy, max {} tokens", self.max_tokens),
            Some((t, seed)) => format!(
                "temperature {t}, seed {seed}, max {} tokens",
                self.max_tokens
            ),
        }
    }
}

/// What one case's generation produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    pub text: String,
    pub tool_calls: Vec<shortlist_evals::ToolCall>,
    pub finish_reason: Option<String>,
    pub prompt_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub latency_s: f64,
    /// The smallest gap between the two most likely tokens' logits along a greedy answer;
    /// `None` when unknown (sampling, an empty answer, or an endpoint without logprobs).
    pub min_top2_gap: Option<f32>,
}

/// The smallest top-2 gap of a chat completion that carries `logprobs.content[].top_logprobs`
/// with two alternatives per token (log-probability gaps equal logit gaps); `None` without them.
pub fn min_top2_gap_of(answer: &Value) -> Option<f32> {
    let content = answer.pointer("/choices/0/logprobs/content")?.as_array()?;
    let mut min: Option<f32> = None;
    for token in content {
        let top = token.get("top_logprobs")?.as_array()?;
        let (a, b) = (top.first()?, top.get(1)?);
        let gap = (a.get("logprob")?.as_f64()? - b.get("logprob")?.as_f64()?).abs() as f32;
        min = Some(min.map_or(gap, |m| m.min(gap)));
    }
    min
}

/// A candidate ready to answer cases.
pub trait Generator {
    /// A name for results and records.
    fn name(&self) -> String;
    /// Answer one chat request. The candidate's own refusal of a case it cannot hold (the prompt
    /// is over its context) is an `Ok` with the error in `finish_reason`: scored as failed. A
    /// request that failed outside the model (transport, another HTTP status, a timeout) is a
    /// [`RunError::Request`]: never scored.
    fn generate(
        &mut self,
        request: &ChatRequest,
        decoding: &Decoding,
    ) -> Result<Generated, RunError>;

    /// Ask every request, keeping up to `concurrency` in flight, each under `policy`.
    /// `on_answer(i, asked)` hears request `i` as it finishes, in the order they finish, on the
    /// calling thread; it returns `false` to ask no more (those in flight still finish and are
    /// heard), or an error that ends the whole call. `abandon()`, asked before each request and
    /// — where a generator computes in steps — between its steps, returns `true` to stop now:
    /// nothing more is asked and what a local engine has in flight is dropped unanswered (a
    /// cancelled or stopping job; a resumed run asks those again). The default asks one after
    /// the other.
    fn ask_all(
        &mut self,
        requests: &[ChatRequest],
        decoding: &Decoding,
        concurrency: usize,
        policy: AskPolicy,
        abandon: &dyn Fn() -> bool,
        on_answer: &mut dyn FnMut(usize, Asked) -> Result<bool, RunError>,
    ) -> Result<(), RunError> {
        let _ = concurrency;
        for (i, request) in requests.iter().enumerate() {
            if abandon() {
                break;
            }
            let asked = ask(self, request, decoding, policy)?;
            if !on_answer(i, asked)? {
                break;
            }
        }
        Ok(())
    }
}

/// Most requests a quality run keeps in flight.
pub const MAX_CONCURRENCY: usize = 64;

/// How a case's request is retried when it fails outside the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AskPolicy {
    /// Attempts in all (at least 1); only retryable failures are tried again.
    pub attempts: u32,
    /// Wait before the second attempt; doubled for each further one.
    pub backoff: std::time::Duration,
}

impl Default for AskPolicy {
    fn default() -> Self {
        AskPolicy {
            attempts: 3,
            backoff: std::time::Duration::from_millis(500),
        }
    }
}

/// What asking a case came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Asked {
    /// The model answered: score it.
    Answered(Generated),
    /// Every attempt failed outside the model: an error, not a failure.
    Failed {
        error: String,
        attempts: u32,
        /// The server was never reached (connection refused, DNS, reset): no HTTP status.
        transport: bool,
    },
}

/// Ask `request` under `policy`: retryable failures (transport, timeouts, 429, 5xx) are tried
/// again with backoff; other errors of the run itself (a broken engine) are returned.
pub fn ask<G: Generator + ?Sized>(
    generator: &mut G,
    request: &ChatRequest,
    decoding: &Decoding,
    policy: AskPolicy,
) -> Result<Asked, RunError> {
    ask_until(generator, request, decoding, policy, &|| false)
        .expect("a request never given up is answered")
}

/// [`ask`], giving up between attempts once `give_up()` is true: `None`, nothing to hear (no
/// further attempt is sent after a cancel).
fn ask_until<G: Generator + ?Sized>(
    generator: &mut G,
    request: &ChatRequest,
    decoding: &Decoding,
    policy: AskPolicy,
    give_up: &dyn Fn() -> bool,
) -> Option<Result<Asked, RunError>> {
    let mut wait = policy.backoff;
    let mut attempt = 0;
    loop {
        attempt += 1;
        match generator.generate(request, decoding) {
            Ok(generated) => return Some(Ok(Asked::Answered(generated))),
            Err(RunError::Request {
                url,
                status,
                why,
                retryable,
            }) => {
                if retryable && attempt < policy.attempts.max(1) {
                    if give_up() {
                        return None;
                    }
                    std::thread::sleep(wait);
                    wait *= 2;
                    if give_up() {
                        return None;
                    }
                    continue;
                }
                let error = match status {
                    Some(code) => format!("{url}: HTTP {code}: {why}"),
                    None => format!("{url}: {why}"),
                };
                return Some(Ok(Asked::Failed {
                    error,
                    attempts: attempt,
                    transport: status.is_none(),
                }));
            }
            Err(other) => return Some(Err(other)),
        }
    }
}

/// An OpenAI-compatible endpoint, asked without streaming; tools go in the `tools` field.
#[derive(Debug, Clone)]
pub struct EndpointGenerator {
    client: reqwest::blocking::Client,
    url: String,
    model: String,
}

impl EndpointGenerator {
    /// A client for `url` (without `/v1`) and `model`.
    pub fn new(url: &str, model: &str) -> Result<Self, RunError> {
        let client = reqwest::blocking::Client::builder()
            .timeout(std::time::Duration::from_secs(600))
            .build()
            .map_err(|e| RunError::Endpoint {
                url: url.to_owned(),
                why: e.to_string(),
            })?;
        Ok(EndpointGenerator {
            client,
            url: url.to_owned(),
            model: model.to_owned(),
        })
    }
}

impl Generator for EndpointGenerator {
    fn name(&self) -> String {
        format!("{}#{}", self.url, self.model)
    }

    fn generate(
        &mut self,
        request: &ChatRequest,
        decoding: &Decoding,
    ) -> Result<Generated, RunError> {
        let started = Instant::now();
        let mut messages: Vec<Value> = Vec::new();
        if let Some(system) = &request.system {
            messages.push(json!({"role": "system", "content": system}));
        }
        for (role, content) in &request.messages {
            messages.push(json!({"role": role, "content": content}));
        }
        let mut body = json!({"model": self.model, "messages": messages, "max_tokens": decoding.max_tokens, "stream": false});
        match decoding.sampling {
            None => {
                body["temperature"] = json!(0.0);
                // The top two alternatives of each token, for the near-ties of the answer.
                body["logprobs"] = json!(true);
                body["top_logprobs"] = json!(2);
            }
            Some((t, seed)) => {
                body["temperature"] = json!(t);
                body["seed"] = json!(seed);
            }
        }
        if !request.tools.is_empty() {
            body["tools"] = Value::Array(request.tools.clone());
        }
        let endpoint = format!("{}/v1/chat/completions", self.url);
        let response = self
            .client
            .post(&endpoint)
            .json(&body)
            .send()
            .map_err(|e| RunError::Request {
                url: endpoint.clone(),
                status: None,
                why: transport_error(&e),
                retryable: true,
            })?;
        let status = response.status();
        let text = response.text().map_err(|e| RunError::Request {
            url: endpoint.clone(),
            status: Some(status.as_u16()),
            why: format!("reading the answer: {}", transport_error(&e)),
            retryable: true,
        })?;
        if !status.is_success() {
            let code = status.as_u16();
            // The candidate's own limit (the prompt does not fit its context), in whichever
            // engine's words, is its failure on this case; any other refusal is a failed
            // request, not an answer.
            if let Some(why) = crate::engines::context_exceeded(code, &text) {
                return Ok(Generated {
                    text: String::new(),
                    tool_calls: Vec::new(),
                    finish_reason: Some(format!("error: context_length_exceeded: {why}")),
                    prompt_tokens: None,
                    output_tokens: Some(0),
                    latency_s: started.elapsed().as_secs_f64(),
                    min_top2_gap: None,
                });
            }
            let why = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| crate::engines::error_message(&v))
                .unwrap_or_else(|| text.chars().take(200).collect());
            return Err(RunError::Request {
                url: endpoint,
                status: Some(code),
                why,
                retryable: code == 408 || code == 429 || code >= 500,
            });
        }
        let value = serde_json::from_str::<Value>(&text);
        let min_top2_gap = value.as_ref().ok().and_then(min_top2_gap_of);
        let answer = value
            .map_err(|e| format!("the answer is not JSON ({e})"))
            .and_then(|value| parse_chat_completion(&value))
            .map_err(|why| RunError::Request {
                url: endpoint,
                status: Some(status.as_u16()),
                why: format!("{why}: {}", text.chars().take(200).collect::<String>()),
                retryable: true,
            })?;
        Ok(Generated {
            text: answer.text,
            tool_calls: answer.tool_calls,
            finish_reason: answer.finish_reason,
            prompt_tokens: answer.prompt_tokens,
            output_tokens: answer.output_tokens,
            latency_s: started.elapsed().as_secs_f64(),
            min_top2_gap,
        })
    }

    /// Over HTTP: `concurrency` threads, each asking the next request not yet taken (one
    /// shared connection pool). When `on_answer` asks no more, the requests already sent still
    /// finish and are heard (they are paid for). When `abandon()` turns true — asked at least
    /// every [`ABANDON_POLL`] while waiting — the call returns at once: the requests in flight
    /// are left to their threads, which send nothing more (no further attempt, no next case)
    /// and end when their answer or the request timeout comes, unheard; a resumed run asks
    /// those cases again. A cancel never waits on a slow or silent endpoint.
    fn ask_all(
        &mut self,
        requests: &[ChatRequest],
        decoding: &Decoding,
        concurrency: usize,
        policy: AskPolicy,
        abandon: &dyn Fn() -> bool,
        on_answer: &mut dyn FnMut(usize, Asked) -> Result<bool, RunError>,
    ) -> Result<(), RunError> {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use std::sync::mpsc::RecvTimeoutError;
        struct Shared {
            requests: Vec<ChatRequest>,
            decoding: Decoding,
            next: AtomicUsize,
            /// Ask no more cases.
            stop: AtomicBool,
            /// Nothing in flight will be heard: no further attempts either.
            abandoned: AtomicBool,
        }
        let shared = Arc::new(Shared {
            requests: requests.to_vec(),
            decoding: decoding.clone(),
            next: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            abandoned: AtomicBool::new(false),
        });
        let (tx, rx) = std::sync::mpsc::channel::<(usize, Result<Asked, RunError>)>();
        for _ in 0..concurrency.clamp(1, MAX_CONCURRENCY).min(requests.len()) {
            let (tx, mut client, shared) = (tx.clone(), self.clone(), Arc::clone(&shared));
            // Not scoped: an abandoned call does not wait for the request in hand.
            std::thread::spawn(move || {
                while !shared.stop.load(Ordering::Relaxed) {
                    let i = shared.next.fetch_add(1, Ordering::Relaxed);
                    let Some(request) = shared.requests.get(i) else {
                        break;
                    };
                    let give_up = || shared.abandoned.load(Ordering::Relaxed);
                    let Some(asked) =
                        ask_until(&mut client, request, &shared.decoding, policy, &give_up)
                    else {
                        break;
                    };
                    if tx.send((i, asked)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let give_up = || {
            shared.stop.store(true, Ordering::Relaxed);
            shared.abandoned.store(true, Ordering::Relaxed);
        };
        loop {
            if abandon() {
                give_up();
                return Ok(());
            }
            let (i, asked) = match rx.recv_timeout(ABANDON_POLL) {
                Ok(heard) => heard,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            };
            match asked.and_then(|asked| on_answer(i, asked)) {
                Ok(true) => {}
                Ok(false) => shared.stop.store(true, Ordering::Relaxed),
                Err(e) => {
                    give_up();
                    return Err(e);
                }
            }
        }
    }
}

/// How often an endpoint's quality run, waiting for answers, asks whether it is abandoned.
const ABANDON_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// What a non-streamed chat completion carried: the fields a quality run scores.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatAnswer {
    /// The answer's text (`message.content`; empty when the model only called tools).
    pub text: String,
    pub tool_calls: Vec<shortlist_evals::ToolCall>,
    pub finish_reason: Option<String>,
    pub prompt_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
}

/// Read a non-streamed `/v1/chat/completions` answer as vLLM, SGLang, TGI, llama.cpp's server
/// and Shortlist's engine shape it: `choices[0].message` with `content` (null or absent beside
/// tool calls) and `tool_calls` (`function.arguments` a JSON string, or an object as some
/// servers send it), `finish_reason`, and `usage`. An answer without `choices[0].message` is
/// not an answer.
pub fn parse_chat_completion(value: &Value) -> Result<ChatAnswer, String> {
    let choice = &value["choices"][0];
    let message = &choice["message"];
    if !message.is_object() {
        return Err("the answer has no `choices[0].message`".to_owned());
    }
    let tool_calls = message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    let arguments = match &c["function"]["arguments"] {
                        Value::String(text) => text.clone(),
                        Value::Null => "{}".to_owned(),
                        other => other.to_string(),
                    };
                    shortlist_evals::ToolCall::from_openai(
                        c["function"]["name"].as_str().unwrap_or_default(),
                        &arguments,
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(ChatAnswer {
        text: message["content"].as_str().unwrap_or_default().to_owned(),
        tool_calls,
        finish_reason: choice["finish_reason"].as_str().map(str::to_owned),
        prompt_tokens: value["usage"]["prompt_tokens"].as_u64(),
        output_tokens: value["usage"]["completion_tokens"].as_u64(),
    })
}

/// A transport error in words: the innermost cause (e.g. "Connection refused (os error 111)").
fn transport_error(e: &reqwest::Error) -> String {
    let mut source: Option<&dyn std::error::Error> = Some(e);
    let mut last = e.to_string();
    while let Some(s) = source {
        last = s.to_string();
        source = s.source();
    }
    if e.is_timeout() {
        format!("timed out ({last})")
    } else if e.is_connect() {
        format!("cannot connect: {last}")
    } else {
        last
    }
}

/// Open the generator a spec names; a local model on `device`.
pub fn open(
    spec: &CandidateSpec,
    device: &shortlist_engine::device::Device,
) -> Result<Box<dyn Generator>, RunError> {
    Ok(match spec {
        CandidateSpec::Gguf(path) => Box::new(EngineGenerator::open_on(path, device)?),
        CandidateSpec::Endpoint { url, model } => Box::new(EndpointGenerator::new(url, model)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smallest_top2_gap_is_read_from_chat_logprobs() {
        let token = |a: f64, b: f64| json!({"token": "x", "logprob": a, "top_logprobs": [{"token": "x", "logprob": a}, {"token": "y", "logprob": b}]});
        let answer = json!({"choices": [{"logprobs": {"content": [token(-0.1, -3.0), token(-0.6, -0.65), token(-1.0, -2.0)]}}]});
        let gap = min_top2_gap_of(&answer).unwrap();
        assert!((gap - 0.05).abs() < 1e-6, "{gap}");
        // Without logprobs, or with one alternative only, nothing is claimed.
        assert_eq!(
            min_top2_gap_of(&json!({"choices": [{"logprobs": null}]})),
            None
        );
        let one = json!({"choices": [{"logprobs": {"content": [{"token": "x", "logprob": -0.1, "top_logprobs": [{"token": "x", "logprob": -0.1}]}]}}]});
        assert_eq!(min_top2_gap_of(&one), None);
    }
}
