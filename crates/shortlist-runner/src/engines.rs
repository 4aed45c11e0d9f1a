//! Third-party serving engines behind an endpoint candidate: which engine answers at a URL and
//! what it reports about itself ([`identify`]: vLLM, SGLang, TGI, llama.cpp's server, Shortlist's
//! own engine or mock), and each engine's way of refusing a prompt that does not fit its context
//! ([`context_exceeded`]), so that the refusal is the candidate's failure on that case wherever
//! it is served. docs/engines.md has the settings each engine needs.
//!
//! Identification asks only what the engines serve anyway, with short timeouts, and never fails:
//! an endpoint that says nothing recognisable is [`Engine::Unknown`], with what it did say kept
//! in [`EndpointIdentity::reported`].

use std::time::Duration;

use serde_json::{Map, Value, json};

/// How long one identification request may take; an endpoint is probed a few times at most.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The serving engine behind an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// vLLM: `/v1/models` cards `owned_by: "vllm"`, version at `GET /version`.
    Vllm,
    /// SGLang: `/v1/models` cards `owned_by: "sglang"`, version in `GET /get_server_info`.
    Sglang,
    /// Hugging Face text-generation-inference: `GET /info` (`router: "text-generation-router"`).
    Tgi,
    /// llama.cpp's `llama-server`: `owned_by: "llamacpp"`, `Server: llama.cpp`, `GET /props`.
    LlamaCpp,
    /// `shortlist engine serve`: `owned_by: "shortlist"` with the model's context and memory.
    Shortlist,
    /// `shortlist mock serve`: canned answers, no model (`owned_by: "shortlist"`, nothing more).
    Mock,
    /// Nothing recognisable: an OpenAI-compatible server of unknown make.
    Unknown,
}

impl Engine {
    /// The engine's name in records.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Vllm => "vLLM",
            Engine::Sglang => "SGLang",
            Engine::Tgi => "TGI (text-generation-inference)",
            Engine::LlamaCpp => "llama.cpp server",
            Engine::Shortlist => "shortlist engine serve",
            Engine::Mock => "shortlist mock serve (canned answers, no model)",
            Engine::Unknown => "unidentified server",
        }
    }
}

/// What an endpoint reported about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointIdentity {
    /// The endpoint's base URL (without `/v1`).
    pub url: String,
    pub engine: Engine,
    /// The version or build the engine reports (llama.cpp's `build_info`, TGI's version and git
    /// sha, vLLM's and SGLang's package version).
    pub version: Option<String>,
    /// The model as the server names it.
    pub model_id: Option<String>,
    /// The context the server holds per request, in tokens, as it reports it.
    pub context: Option<u64>,
    /// Every probe's answer (or error) by `GET PATH`, and the `Server` header when one was sent.
    pub reported: Value,
}

impl EndpointIdentity {
    /// One line for records, e.g. "llama.cpp server b6100-abc1234 at http://127.0.0.1:8080
    /// (OpenAI-compatible HTTP, model smollm2, context 1024 tokens)".
    pub fn describe(&self) -> String {
        let mut line = self.engine.name().to_owned();
        match (&self.version, self.engine) {
            (Some(version), _) => {
                line.push(' ');
                line.push_str(version);
            }
            (None, Engine::Unknown | Engine::Mock) => {}
            (None, _) => line.push_str(" (version not reported)"),
        }
        if self.engine == Engine::Unknown
            && let Some(server) = self.reported["server"].as_str()
        {
            line.push_str(&format!(" (Server: {server})"));
        }
        line.push_str(&format!(" at {} (OpenAI-compatible HTTP", self.url));
        if let Some(model) = &self.model_id {
            line.push_str(", model ");
            line.push_str(file_name(model));
        }
        if let Some(context) = self.context {
            line.push_str(&format!(", context {context} tokens"));
        }
        line.push(')');
        line
    }
}

/// A model named by a file path is shown by its file name: the server's folders are no part of
/// what was compared.
fn file_name(model: &str) -> &str {
    if model.contains('/') && (model.ends_with(".gguf") || model.starts_with('/')) {
        model.rsplit('/').next().unwrap_or(model)
    } else {
        model
    }
}

/// Ask the endpoint at `url` (without `/v1`) what it is, waiting [`PROBE_TIMEOUT`] at most per
/// request. Never fails: an endpoint that cannot be reached or says nothing recognisable is
/// [`Engine::Unknown`] with what it saw.
pub fn identify(url: &str) -> EndpointIdentity {
    identify_within(url, PROBE_TIMEOUT)
}

/// [`identify`] with another per-request timeout.
pub fn identify_within(url: &str, timeout: Duration) -> EndpointIdentity {
    let url = url.trim_end_matches('/').to_owned();
    let mut id = EndpointIdentity {
        url: url.clone(),
        engine: Engine::Unknown,
        version: None,
        model_id: None,
        context: None,
        reported: Value::Null,
    };
    let mut probe = match Probe::new(&url, timeout) {
        Ok(probe) => probe,
        Err(why) => {
            id.reported = json!({ "client": why });
            return id;
        }
    };
    let models = probe.get("/v1/models");
    if models.is_err() && !probe.reached {
        // Nothing answers there: other paths would not either.
        id.reported = probe.finish();
        return id;
    }
    let card = models
        .as_ref()
        .ok()
        .map_or(Value::Null, |m| m["data"][0].clone());
    id.model_id = card["id"].as_str().map(str::to_owned);
    // vLLM, SGLang and Shortlist's engine say `max_model_len`; llama.cpp a slot's `meta.n_ctx`.
    id.context = card["max_model_len"]
        .as_u64()
        .or_else(|| card["meta"]["n_ctx"].as_u64());
    id.engine = match card["owned_by"].as_str() {
        Some("vllm") => Engine::Vllm,
        Some("sglang") => Engine::Sglang,
        Some("llamacpp") => Engine::LlamaCpp,
        Some("shortlist") if card.get("max_model_len").is_some() => Engine::Shortlist,
        Some("shortlist") => Engine::Mock,
        _ if probe.server.as_deref() == Some("llama.cpp") => Engine::LlamaCpp,
        _ => Engine::Unknown,
    };
    // Each probe says whether it confirmed its engine; only the unknown case needs the answer.
    match id.engine {
        Engine::Vllm => _ = vllm(&mut probe, &mut id),
        Engine::Sglang => _ = sglang(&mut probe, &mut id),
        Engine::LlamaCpp => _ = llama_cpp(&mut probe, &mut id),
        Engine::Tgi | Engine::Shortlist | Engine::Mock => {}
        // TGI's cards say nothing of the server (`owned_by` is the model id): its own info
        // endpoint, then the others', in case a proxy in front changed the cards.
        Engine::Unknown => {
            if !tgi(&mut probe, &mut id)
                && !llama_cpp(&mut probe, &mut id)
                && !sglang(&mut probe, &mut id)
            {
                _ = vllm(&mut probe, &mut id);
            }
        }
    }
    id.reported = probe.finish();
    id
}

/// What checking an endpoint candidate found now: whether it answers, what it is, and whether
/// it lists the model the candidate's requests name. A check, not a gate: an endpoint may be down
/// while a study is prepared, and some engines (llama.cpp's server) answer whatever the name.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EndpointCheck {
    pub url: String,
    /// The model the candidate's requests name (`default` when its source names none).
    pub model: String,
    /// Whether anything answered over HTTP.
    pub reached: bool,
    /// The endpoint in one line ([`EndpointIdentity::describe`]) when it answered.
    pub identity: Option<String>,
    /// The model ids its `GET /v1/models` lists (empty when it lists none).
    pub served: Vec<String>,
    /// What would make its cases fail, in words; `None` when the check saw nothing wrong.
    pub problem: Option<String>,
}

/// Check the endpoint candidate at `url` (without `/v1`) asking for `model`, waiting `timeout`
/// at most per request.
pub fn check_endpoint(url: &str, model: &str, timeout: Duration) -> EndpointCheck {
    check_of(&identify_within(url, timeout), model)
}

/// [`EndpointCheck`] from what identifying the endpoint saw.
fn check_of(id: &EndpointIdentity, model: &str) -> EndpointCheck {
    let models = &id.reported["GET /v1/models"];
    let served: Vec<String> = models["body"]["data"]
        .as_array()
        .map(|cards| {
            cards
                .iter()
                .filter_map(|c| c["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let reached = id
        .reported
        .as_object()
        .is_some_and(|seen| seen.values().any(|v| v.get("status").is_some()));
    let status = models["status"].as_u64();
    let problem = if !reached {
        // The innermost cause ("Connection refused (os error 111)") of the error chain.
        let why = models["error"]
            .as_str()
            .or_else(|| id.reported["client"].as_str())
            .map_or("no answer", |e| e.rsplit(": ").next().unwrap_or(e));
        Some(format!("nothing answers at {}: {why}", id.url))
    } else if let Some(code) = status.filter(|c| !(200..300).contains(c)) {
        Some(format!(
            "GET /v1/models answered HTTP {code}: not an OpenAI-compatible server at this URL (name it without `/v1/chat/completions`)"
        ))
    } else if !served.is_empty() && !served.iter().any(|s| s == model) {
        let listed: Vec<String> = served.iter().take(5).map(|s| format!("`{s}`")).collect();
        Some(format!(
            "it lists {}{} and not `{model}`: an engine that checks the name (vLLM does) refuses every case; name one of them after `#`",
            listed.join(", "),
            if served.len() > 5 { ", …" } else { "" }
        ))
    } else {
        None
    };
    EndpointCheck {
        url: id.url.clone(),
        model: model.to_owned(),
        reached,
        identity: reached.then(|| id.describe()),
        served,
        problem,
    }
}

/// vLLM: `GET /version` → `{"version": "0.10.1.1"}`.
fn vllm(probe: &mut Probe, id: &mut EndpointIdentity) -> bool {
    let Ok(body) = probe.get("/version") else {
        return false;
    };
    let Some(version) = body["version"].as_str() else {
        return false;
    };
    id.engine = Engine::Vllm;
    id.version = Some(version.to_owned());
    true
}

/// SGLang: `GET /get_server_info` (older and newer releases also `/server_info`) carries the
/// server arguments and `version`; `GET /get_model_info` the model path.
fn sglang(probe: &mut Probe, id: &mut EndpointIdentity) -> bool {
    let info = match probe.get("/get_server_info") {
        Ok(info) => info,
        Err(_) => match probe.get("/server_info") {
            Ok(info) => info,
            Err(_) => return false,
        },
    };
    let Some(version) = info["version"].as_str() else {
        return false;
    };
    id.engine = Engine::Sglang;
    id.version = Some(version.to_owned());
    if id.context.is_none() {
        id.context = info["context_length"].as_u64();
    }
    if id.model_id.is_none() {
        id.model_id = info["served_model_name"]
            .as_str()
            .or_else(|| info["model_path"].as_str())
            .map(str::to_owned);
    }
    if let Ok(model) = probe.get("/get_model_info")
        && id.model_id.is_none()
    {
        id.model_id = model["model_path"].as_str().map(str::to_owned);
    }
    true
}

/// TGI: `GET /info` → `model_id`, `max_total_tokens`, `router`, `version`, `sha`.
fn tgi(probe: &mut Probe, id: &mut EndpointIdentity) -> bool {
    let Ok(info) = probe.get("/info") else {
        return false;
    };
    let is_tgi = info["router"]
        .as_str()
        .is_some_and(|r| r.starts_with("text-generation"))
        || (info["max_total_tokens"].is_u64() && info["version"].is_string());
    if !is_tgi {
        return false;
    }
    id.engine = Engine::Tgi;
    id.version = info["version"]
        .as_str()
        .map(|v| match info["sha"].as_str() {
            Some(sha) => format!("{v} (git {})", sha.chars().take(7).collect::<String>()),
            None => v.to_owned(),
        });
    if let Some(model) = info["model_id"].as_str() {
        id.model_id = Some(model.to_owned());
    }
    id.context = info["max_total_tokens"].as_u64().or(id.context);
    true
}

/// llama.cpp: `GET /props` → `build_info` ("b6100-abc1234"), `model_path`, and the context of
/// one slot in `default_generation_settings.n_ctx`.
fn llama_cpp(probe: &mut Probe, id: &mut EndpointIdentity) -> bool {
    let props = match probe.get("/props") {
        Ok(props) => props,
        // A llama.cpp server that says so in its cards or header is one even if /props is off.
        Err(_) => return id.engine == Engine::LlamaCpp,
    };
    let build = props["build_info"].as_str();
    if build.is_none() && id.engine != Engine::LlamaCpp {
        return false;
    }
    id.engine = Engine::LlamaCpp;
    id.version = build.map(str::to_owned);
    if id.model_id.is_none() {
        id.model_id = props["model_path"].as_str().map(str::to_owned);
    }
    id.context = props["default_generation_settings"]["n_ctx"]
        .as_u64()
        .or_else(|| props["n_ctx"].as_u64())
        .or(id.context);
    true
}

/// The identification requests and everything they saw.
struct Probe {
    client: reqwest::blocking::Client,
    base: String,
    seen: Map<String, Value>,
    server: Option<String>,
    /// Whether any request got an HTTP answer.
    reached: bool,
}

impl Probe {
    fn new(base: &str, timeout: Duration) -> Result<Probe, String> {
        let client = reqwest::blocking::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| format!("building the HTTP client: {e}"))?;
        Ok(Probe {
            client,
            base: base.to_owned(),
            seen: Map::new(),
            server: None,
            reached: false,
        })
    }

    /// `GET path`: the JSON body of a 2xx answer; anything else is kept and is an `Err`.
    fn get(&mut self, path: &str) -> Result<Value, ()> {
        let key = format!("GET {path}");
        let response = match self.client.get(format!("{}{path}", self.base)).send() {
            Ok(response) => response,
            Err(e) => {
                self.seen
                    .insert(key, json!({ "error": shortlist_loadgen::http::chain(&e) }));
                return Err(());
            }
        };
        self.reached = true;
        let status = response.status().as_u16();
        if self.server.is_none() {
            self.server = response
                .headers()
                .get(reqwest::header::SERVER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
        }
        let text = match response.text() {
            Ok(text) => text,
            Err(e) => {
                self.seen.insert(
                    key,
                    json!({ "status": status, "error": shortlist_loadgen::http::chain(&e) }),
                );
                return Err(());
            }
        };
        let body = serde_json::from_str::<Value>(&text)
            .unwrap_or_else(|_| Value::String(text.chars().take(300).collect()));
        let ok = (200..300).contains(&status) && body.is_object();
        self.seen
            .insert(key, json!({ "status": status, "body": body.clone() }));
        if ok { Ok(body) } else { Err(()) }
    }

    fn finish(self) -> Value {
        let mut seen = self.seen;
        if let Some(server) = self.server {
            seen.insert("server".to_owned(), Value::String(server));
        }
        Value::Object(seen)
    }
}

/// The message of an error answer, in whichever shape the engine writes it: OpenAI's, vLLM's
/// current one and llama.cpp's `{"error": {"message"}}`; SGLang's and older vLLM's flat
/// `{"object": "error", "message"}`; TGI's `{"error": "…", "error_type"}`; FastAPI's
/// `{"detail"}`.
pub fn error_message(body: &Value) -> Option<String> {
    let text = |v: &Value| v.as_str().map(str::to_owned);
    text(&body["error"]["message"])
        .or_else(|| text(&body["error"]))
        .or_else(|| text(&body["message"]))
        .or_else(|| text(&body["detail"]))
}

/// Whether an error answer (`status`, `body`) is the engine refusing a prompt over its context,
/// and if so its message. Each engine says it its own way:
///
/// - OpenAI and `shortlist engine serve`: `error.code == "context_length_exceeded"`;
/// - llama.cpp: 400, `error.type == "exceed_context_size_error"` (with `n_prompt_tokens` and
///   `n_ctx`);
/// - vLLM: 400, "You passed … input tokens and requested … output tokens. However, the model's
///   context length is only … tokens" (releases before the renderer: "This model's maximum
///   context length is … tokens", also when `max_tokens` is what does not fit);
/// - SGLang: 400, "The input (… tokens) is longer than the model's context length (… tokens)"
///   or "Requested token count exceeds the model's maximum context length of …";
/// - TGI: 422, `error_type: "validation"`, "Input validation error: `inputs` must have less
///   than … tokens" or "`inputs` tokens + `max_new_tokens` must be <= …".
///
/// Any other refusal (a bad parameter, an unknown model, an overloaded server) is not.
pub fn context_exceeded(status: u16, body: &str) -> Option<String> {
    if !(400..500).contains(&status) {
        return None;
    }
    let value: Value = serde_json::from_str(body).ok()?;
    let message = error_message(&value).unwrap_or_default();
    let lower = message.to_lowercase();
    let error = &value["error"];
    if error["code"] == "context_length_exceeded" {
        return Some(message);
    }
    if error["type"] == "exceed_context_size_error" {
        return Some(
            match (error["n_prompt_tokens"].as_u64(), error["n_ctx"].as_u64()) {
                (Some(prompt), Some(context)) => {
                    format!("{message} (prompt {prompt} tokens, context {context} tokens)")
                }
                _ => message,
            },
        );
    }
    if status == 400
        && (lower.contains("maximum context length")
            || lower.contains("context length is only")
            || lower.contains("longer than the model's context length"))
    {
        return Some(message);
    }
    if status == 422
        && value["error_type"] == "validation"
        && ((lower.contains("`inputs` must have less than") && lower.contains("tokens"))
            || lower.contains("`inputs` tokens + `max_new_tokens` must be <="))
    {
        return Some(message);
    }
    None
}

#[cfg(test)]
mod tests;
