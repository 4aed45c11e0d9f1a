//! Candidates a quality run can drive: a local GGUF model on the engine, or an OpenAI-compatible
//! endpoint (vLLM, SGLang, TGI, llama.cpp server, `shortlist engine serve`).

use std::path::PathBuf;
use std::time::Instant;

use serde_json::{Value, json};
use shortlist_engine::engine::{LoadOptions, LoadedModel, ReuseCache};
use shortlist_engine::sampling::SamplingParams;

use crate::error::RunError;
use crate::prompt::{ChatRequest, parse_prompted_tool_calls, prompt_messages};

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
}

/// A candidate ready to answer cases.
pub trait Generator {
    /// A name for results and records.
    fn name(&self) -> String;
    /// Answer one chat request. A per-case failure (context too long, HTTP 400) is an `Ok`
    /// with the error in `finish_reason`, so that the case is scored as failed and the run goes on.
    fn generate(
        &mut self,
        request: &ChatRequest,
        decoding: &Decoding,
    ) -> Result<Generated, RunError>;
}

/// A GGUF model on the local engine. Tools are described in the system prompt and calls are
/// parsed from `<tool_call>{...}</tool_call>` blocks (prompted tool calling).
#[derive(Debug)]
pub struct EngineGenerator {
    model: LoadedModel,
    name: String,
    /// The KV cache of the last case: the next case's shared prefix (system prompt, tool
    /// descriptions) is not computed again.
    reuse: ReuseCache,
}

impl EngineGenerator {
    /// Load the model.
    pub fn open(path: &std::path::Path) -> Result<Self, RunError> {
        let model = LoadedModel::open(path, &LoadOptions::default())?;
        let name = model.name().to_owned();
        Ok(EngineGenerator {
            model,
            name,
            reuse: ReuseCache::default(),
        })
    }
}

impl Generator for EngineGenerator {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn generate(
        &mut self,
        request: &ChatRequest,
        decoding: &Decoding,
    ) -> Result<Generated, RunError> {
        let started = Instant::now();
        let messages: Vec<shortlist_engine::chat::Message> = prompt_messages(request)
            .into_iter()
            .map(|(role, content)| shortlist_engine::chat::Message { role, content })
            .collect();
        let prompt = self.model.render_chat(&messages)?;
        let ids = self.model.encode_prompt(&prompt)?;
        let params = match decoding.sampling {
            None => SamplingParams::greedy(decoding.max_tokens),
            Some((temperature, seed)) => {
                SamplingParams::new(temperature, 1.0, 0, seed, decoding.max_tokens, Vec::new())?
            }
        };
        if let Err(e) = self.model.check_context(ids.len(), decoding.max_tokens) {
            return Ok(Generated {
                text: String::new(),
                tool_calls: Vec::new(),
                finish_reason: Some(format!("error: {e}")),
                prompt_tokens: Some(ids.len() as u64),
                output_tokens: Some(0),
                latency_s: started.elapsed().as_secs_f64(),
            });
        }
        let out = self
            .model
            .generate_reusing(&mut self.reuse, &ids, &params, |_| true)?;
        let (text, tool_calls) = if request.tools.is_empty() {
            (out.text.clone(), Vec::new())
        } else {
            parse_prompted_tool_calls(&out.text)
        };
        Ok(Generated {
            text,
            finish_reason: Some(if tool_calls.is_empty() {
                out.finish.as_str().to_owned()
            } else {
                "tool_calls".to_owned()
            }),
            tool_calls,
            prompt_tokens: Some(ids.len() as u64),
            output_tokens: Some(out.tokens.len() as u64),
            latency_s: started.elapsed().as_secs_f64(),
        })
    }
}

/// An OpenAI-compatible endpoint, asked without streaming; tools go in the `tools` field.
#[derive(Debug)]
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
            None => body["temperature"] = json!(0.0),
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
            .map_err(|e| RunError::Endpoint {
                url: endpoint.clone(),
                why: e.to_string(),
            })?;
        let status = response.status();
        let value: Value = response.json().unwrap_or(Value::Null);
        if !status.is_success() {
            // A refused case (e.g. context too long) is the candidate's failure, not the run's.
            let why = value["error"]["message"]
                .as_str()
                .unwrap_or("no error message")
                .to_owned();
            return Ok(Generated {
                text: String::new(),
                tool_calls: Vec::new(),
                finish_reason: Some(format!("error: HTTP {status}: {why}")),
                prompt_tokens: None,
                output_tokens: Some(0),
                latency_s: started.elapsed().as_secs_f64(),
            });
        }
        let choice = &value["choices"][0];
        let message = &choice["message"];
        let tool_calls = message["tool_calls"]
            .as_array()
            .map(|calls| {
                calls
                    .iter()
                    .map(|c| {
                        shortlist_evals::ToolCall::from_openai(
                            c["function"]["name"].as_str().unwrap_or_default(),
                            c["function"]["arguments"].as_str().unwrap_or("{}"),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Generated {
            text: message["content"].as_str().unwrap_or_default().to_owned(),
            tool_calls,
            finish_reason: choice["finish_reason"].as_str().map(str::to_owned),
            prompt_tokens: value["usage"]["prompt_tokens"].as_u64(),
            output_tokens: value["usage"]["completion_tokens"].as_u64(),
            latency_s: started.elapsed().as_secs_f64(),
        })
    }
}

/// Open the generator a spec names.
pub fn open(spec: &CandidateSpec) -> Result<Box<dyn Generator>, RunError> {
    Ok(match spec {
        CandidateSpec::Gguf(path) => Box::new(EngineGenerator::open(path)?),
        CandidateSpec::Endpoint { url, model } => Box::new(EndpointGenerator::new(url, model)?),
    })
}
