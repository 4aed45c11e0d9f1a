//! The OpenAI-compatible HTTP target: `/v1/chat/completions` or `/v1/completions`, streamed as
//! server-sent events with `stream_options.include_usage`.
//!
//! Every way a server can misbehave ends as an error the driver records — refused connection,
//! HTTP error status, garbage instead of SSE, a stream that closes before its end — never a
//! panic, and the chunks that arrived before the failure stay in the record. A hang is ended by
//! the driver's timeout.

use std::time::Duration;

use crate::error::{LoadgenError, TargetError};
use crate::sse::{SseParser, StreamChunk};
use crate::target::{Observation, Target, TokenKind};
use crate::workload::RequestSpec;

/// Which OpenAI API the target speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `/v1/chat/completions` (messages in, `delta.content` out).
    Chat,
    /// `/v1/completions` (prompt in, `text` out).
    Completions,
}

/// An OpenAI-compatible endpoint.
#[derive(Debug, Clone)]
pub struct OpenAiTarget {
    client: reqwest::Client,
    url: String,
    api: Api,
    model: String,
    ignore_eos: bool,
    request_ids: RequestIds,
}

/// What goes in each request's `x-request-id` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RequestIds {
    /// The trace's request id, verbatim (vLLM, SGLang and our engine log it as given).
    #[default]
    Id,
    /// A UUID derived from the request id and attempt, for servers that refuse anything else
    /// (llama-cpp-python's server answers 400 to a non-UUID id); the same id always gives the
    /// same UUID, so server logs can still be joined to the records.
    Uuid,
    /// No header.
    None,
}

impl RequestIds {
    /// Parse `id`, `uuid` or `none`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "id" => Ok(RequestIds::Id),
            "uuid" => Ok(RequestIds::Uuid),
            "none" => Ok(RequestIds::None),
            other => Err(format!("`{other}`: expected id, uuid or none")),
        }
    }
}

/// A version-4-shaped UUID from `id` (two 64-bit SipHash halves with fixed keys).
pub fn request_uuid(id: &str) -> String {
    use std::hash::{Hash, Hasher};
    let half = |salt: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        salt.hash(&mut h);
        id.hash(&mut h);
        h.finish()
    };
    let (a, b) = (half(1), half(2));
    let a = (a & 0xffff_ffff_ffff_0fff) | 0x4000;
    let b = (b & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

impl OpenAiTarget {
    /// Parse `http://host:port[/v1/chat/completions | /v1/completions]` (the chat API when the
    /// path names none). `model` goes in every request; with `ignore_eos`, vLLM-style servers
    /// generate exactly the trace's output length.
    pub fn new(spec: &str, model: &str, ignore_eos: bool) -> Result<Self, LoadgenError> {
        let bad = |why: &str| LoadgenError::TargetSpec {
            spec: spec.to_owned(),
            why: why.to_owned(),
        };
        let rest = spec.strip_prefix("http://").ok_or_else(|| {
            bad("an HTTP target starts with http:// (TLS is not built in; use a local proxy)")
        })?;
        let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        let path = path.trim_end_matches('/');
        let (api, path) = if path.ends_with("chat/completions") {
            (Api::Chat, path.to_owned())
        } else if path.ends_with("completions") {
            (Api::Completions, path.to_owned())
        } else if path.is_empty() {
            (Api::Chat, "v1/chat/completions".to_owned())
        } else if path.ends_with("v1") {
            (Api::Chat, format!("{path}/chat/completions"))
        } else {
            return Err(bad(
                "the path must be empty, /v1, /v1/chat/completions or /v1/completions",
            ));
        };
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| bad(&format!("cannot build the HTTP client: {e}")))?;
        Ok(OpenAiTarget {
            client,
            url: format!("http://{authority}/{path}"),
            api,
            model: model.to_owned(),
            ignore_eos,
            request_ids: RequestIds::Id,
        })
    }

    /// Choose what goes in the `x-request-id` header.
    pub fn with_request_ids(mut self, request_ids: RequestIds) -> Self {
        self.request_ids = request_ids;
        self
    }

    /// The full endpoint URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The API spoken.
    pub fn api(&self) -> Api {
        self.api
    }

    fn body(&self, request: &RequestSpec) -> Vec<u8> {
        let mut body = serde_json::json!({
            "model": self.model,
            "max_tokens": request.max_tokens(),
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        match self.api {
            Api::Chat => {
                body["messages"] = match request.messages() {
                    Some(messages) => messages.clone(),
                    None => serde_json::json!([{"role": "user", "content": prompt_text(request)}]),
                };
            }
            Api::Completions => body["prompt"] = prompt_text(request).into(),
        }
        if self.ignore_eos {
            body["ignore_eos"] = true.into();
        }
        serde_json::to_vec(&body).expect("JSON values serialize")
    }
}

/// The request's prompt, or a stand-in of about its length: the prefix group's text (identical
/// across the group, so a server's prefix cache can hit) followed by text unique to the request
/// (and to the load step, when the workload is salted).
/// One short word is about one token in common tokenizers; the server's usage is what the record
/// keeps as the prompt length when it reports one.
fn prompt_text(request: &RequestSpec) -> String {
    if let Some(prompt) = request.prompt() {
        return prompt.to_owned();
    }
    let total = request.input_tokens() as usize;
    let shared = request
        .prefix()
        .map_or(0, |p| p.tokens() as usize)
        .min(total);
    let mut text = String::with_capacity(total * 3 + 32);
    if let Some(prefix) = request.prefix() {
        text.push_str(prefix.group());
        text.push(':');
        text.push_str(&" a".repeat(shared.saturating_sub(2)));
    }
    text.push(' ');
    if let Some(salt) = request.salt() {
        text.push_str(salt);
        text.push(' ');
    }
    text.push_str(request.id());
    text.push(':');
    text.push_str(&" b".repeat(total.saturating_sub(shared).saturating_sub(2)));
    text
}

/// An error and its causes on one line (reqwest's own message hides the cause, e.g. "connection
/// refused").
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

impl Target for OpenAiTarget {
    fn describe(&self) -> String {
        self.url.clone()
    }

    async fn send<'a>(
        &'a self,
        request: &'a RequestSpec,
        observation: &'a mut Observation,
    ) -> Result<(), TargetError> {
        let body = self.body(request);
        observation.mark_sent();
        let mut post = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream");
        post = match self.request_ids {
            RequestIds::Id => post.header("x-request-id", request.id()),
            RequestIds::Uuid => post.header("x-request-id", request_uuid(request.id())),
            RequestIds::None => post,
        };
        let mut response = post
            .body(body)
            .send()
            .await
            .map_err(|e| TargetError::Connect(chain(&e)))?;
        let status = response.status();
        if !status.is_success() {
            let mut text = String::new();
            // Keep only the start of an error body: it explains, it is not data.
            while let Ok(Some(piece)) = response.chunk().await {
                text.push_str(&String::from_utf8_lossy(&piece));
                if text.len() > 500 {
                    break;
                }
            }
            let text: String = text.chars().take(500).collect();
            return Err(TargetError::Status {
                status: status.as_u16(),
                body: text.trim().to_owned(),
            });
        }
        let mut parser = SseParser::new();
        let mut done = false;
        let mut finished = false;
        let mut events = 0_u64;
        loop {
            let piece = match response.chunk().await {
                Ok(Some(piece)) => piece,
                Ok(None) => break,
                Err(e) => {
                    return Err(TargetError::Closed(format!(
                        "the stream broke after {} bytes and {events} events: {}",
                        parser.position(),
                        chain(&e)
                    )));
                }
            };
            let position = parser.position();
            parser.push(&piece, |data| {
                events += 1;
                if done {
                    return Ok(());
                }
                if data == b"[DONE]" {
                    done = true;
                    return Ok(());
                }
                let chunk: StreamChunk<'_> = serde_json::from_slice(data).map_err(|e| {
                    let shown: String = String::from_utf8_lossy(data).chars().take(80).collect();
                    TargetError::Protocol(format!(
                        "event {events} near byte {position} is not a JSON chunk ({e}): {shown:?}"
                    ))
                })?;
                if let Some(error) = &chunk.error {
                    return Err(TargetError::Server(error.to_string()));
                }
                let tokens = chunk.tokens();
                observation.tokens(tokens.output, TokenKind::Output);
                observation.tokens(tokens.reasoning, TokenKind::Reasoning);
                finished |= tokens.finished;
                if let Some(usage) = &chunk.usage {
                    let cached = usage
                        .prompt_tokens_details
                        .as_ref()
                        .and_then(|d| d.cached_tokens);
                    observation.usage(usage.prompt_tokens, usage.completion_tokens, cached);
                }
                if let Some(stages) = chunk.stages {
                    observation.stages(stages);
                }
                if let Some(timings) = &chunk.shortlist_timings {
                    observation.stages(timings.stages());
                }
                Ok(())
            })?;
            if done {
                // Let the body end so the connection goes back to the pool; do not wait on a
                // server that keeps it open after [DONE].
                let _ = tokio::time::timeout(Duration::from_millis(20), response.chunk()).await;
                return Ok(());
            }
        }
        if finished {
            // The answer said it finished; only the [DONE] terminator is missing.
            return Ok(());
        }
        Err(TargetError::Closed(format!(
            "the stream ended before [DONE] after {} bytes and {events} events",
            parser.position()
        )))
    }
}

#[cfg(test)]
mod request_id_tests {
    use super::*;

    #[test]
    fn request_uuids_are_stable_version_4_shaped_and_distinct() {
        let a = request_uuid("r0");
        assert_eq!(a, request_uuid("r0"));
        assert_ne!(a, request_uuid("r1"));
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'), "{a}");
        assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{a}");
        assert_eq!(RequestIds::parse("uuid"), Ok(RequestIds::Uuid));
        assert!(RequestIds::parse("guid").is_err());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_endpoint_specs() {
        let t = OpenAiTarget::new("http://127.0.0.1:8000", "m", false).unwrap();
        assert_eq!(
            (t.url(), t.api()),
            ("http://127.0.0.1:8000/v1/chat/completions", Api::Chat)
        );
        let t = OpenAiTarget::new("http://h:1/v1/completions", "m", false).unwrap();
        assert_eq!(
            (t.url(), t.api()),
            ("http://h:1/v1/completions", Api::Completions)
        );
        let t = OpenAiTarget::new("http://h:1/v1/", "m", false).unwrap();
        assert_eq!(t.url(), "http://h:1/v1/chat/completions");
        assert!(OpenAiTarget::new("https://h", "m", false).is_err());
        assert!(OpenAiTarget::new("http:///v1", "m", false).is_err());
        assert!(OpenAiTarget::new("http://h/other", "m", false).is_err());
    }

    #[test]
    fn stand_in_prompts_share_the_group_prefix() {
        let p = crate::workload::Prefix::new("g1", 100);
        let a = prompt_text(&RequestSpec::new("a", 150, 1).with_prefix(p.clone()));
        let b = prompt_text(&RequestSpec::new("b", 120, 1).with_prefix(p));
        let shared = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
        assert!(shared >= 190, "{shared}");
        assert_ne!(a, b);
    }

    #[test]
    fn each_salted_step_sends_prompts_no_other_step_sent() {
        let p = crate::workload::Prefix::new("g1", 100);
        let request = RequestSpec::new("r7", 150, 1).with_prefix(p.clone());
        let w = crate::workload::Workload::new(
            "w",
            vec![crate::workload::Arrival { t: 0.0, request }],
            None,
        )
        .unwrap();
        let step = |label: &str| prompt_text(&w.salted(label).arrivals()[0].request);
        let (target, sweep) = (step("target"), step("rate-2"));
        // The same request in two steps: another prompt, past the group's shared prefix.
        assert_ne!(target, sweep);
        let shared = target
            .chars()
            .zip(sweep.chars())
            .take_while(|(x, y)| x == y)
            .count();
        assert!((190..210).contains(&shared), "{shared}");
        // Within a step, the group's prefix is still shared by its requests.
        let other = RequestSpec::new("r8", 150, 1).with_prefix(p);
        let w2 = crate::workload::Workload::new(
            "w",
            vec![crate::workload::Arrival {
                t: 0.0,
                request: other,
            }],
            None,
        )
        .unwrap();
        let other = prompt_text(&w2.salted("rate-2").arrivals()[0].request);
        let shared = sweep
            .chars()
            .zip(other.chars())
            .take_while(|(x, y)| x == y)
            .count();
        assert!(shared >= 190, "{shared}");
        // A trace's own prompt is sent as it is.
        let given = RequestSpec::new("r9", 3, 1).with_prompt("hello there");
        let w3 = crate::workload::Workload::new(
            "w",
            vec![crate::workload::Arrival {
                t: 0.0,
                request: given,
            }],
            None,
        )
        .unwrap();
        assert_eq!(
            prompt_text(&w3.salted("rate-2").arrivals()[0].request),
            "hello there"
        );
    }
}
