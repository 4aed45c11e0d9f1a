//! Server-sent events: split a byte stream into events, and read OpenAI-style streamed chunks.
//!
//! Bytes arrive in arbitrary pieces (a line can be cut anywhere, even inside a UTF-8 character),
//! so the parser buffers until a line ends and dispatches an event at each blank line.

use std::borrow::Cow;

use serde::Deserialize;

use crate::error::TargetError;

/// Incremental SSE parser: feed bytes, get the `data` of each complete event.
#[derive(Debug, Default)]
pub struct SseParser {
    buffer: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
    consumed: u64,
}

/// Longest line accepted; a peer that never ends a line must not grow memory without bound.
const MAX_LINE: usize = 16 << 20;

impl SseParser {
    /// An empty parser.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed `bytes`; `on_event` receives each complete event's data (lines joined by `\n`).
    pub fn push(
        &mut self,
        bytes: &[u8],
        mut on_event: impl FnMut(&[u8]) -> Result<(), TargetError>,
    ) -> Result<(), TargetError> {
        self.buffer.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(offset) = memchr_newline(&self.buffer[start..]) {
            let end = start + offset;
            let mut line = &self.buffer[start..end];
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            if line.is_empty() {
                if self.has_data {
                    on_event(&self.data)?;
                }
                self.data.clear();
                self.has_data = false;
            } else if let Some(value) = line.strip_prefix(b"data:") {
                let value = value.strip_prefix(b" ").unwrap_or(value);
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            // Comments (`:`), `event:`, `id:` and `retry:` lines carry nothing we time.
            start = end + 1;
        }
        self.consumed += start as u64;
        self.buffer.drain(..start);
        if self.buffer.len() > MAX_LINE {
            return Err(TargetError::Protocol(format!(
                "an SSE line longer than {MAX_LINE} bytes at byte {}: not an event stream",
                self.consumed
            )));
        }
        Ok(())
    }

    /// Bytes consumed so far (for error positions).
    pub fn position(&self) -> u64 {
        self.consumed
    }
}

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', bytes)
}

/// One streamed chunk of `/v1/chat/completions` or `/v1/completions` (the fields we read).
#[derive(Debug, Deserialize)]
pub struct StreamChunk<'a> {
    #[serde(default, borrow)]
    pub choices: Vec<Choice<'a>>,
    #[serde(default)]
    pub usage: Option<Usage>,
    #[serde(default)]
    pub error: Option<serde_json::Value>,
    /// Server stage times in seconds (an extension; others do not send it).
    #[serde(default)]
    pub stages: Option<shortlist_measure::record::Stages>,
    /// Shortlist's engine reports each request's stage boundaries on its last chunk.
    #[serde(default)]
    pub shortlist_timings: Option<EngineTimings>,
}

/// Stage boundaries as `shortlist engine serve` reports them: seconds after the request's arrival.
#[derive(Debug, Default, Deserialize)]
pub struct EngineTimings {
    #[serde(default)]
    pub preprocess_start_s: f64,
    #[serde(default)]
    pub preprocess_end_s: f64,
    #[serde(default)]
    pub queued_s: f64,
    #[serde(default)]
    pub admitted_s: f64,
    #[serde(default)]
    pub prefill_chunks: Vec<EngineChunkTiming>,
    #[serde(default)]
    pub first_token_s: Option<f64>,
    #[serde(default)]
    pub token_s: Vec<f64>,
    #[serde(default)]
    pub postprocess_total_s: f64,
}

/// One prefill step of a request.
#[derive(Debug, Default, Deserialize)]
pub struct EngineChunkTiming {
    #[serde(default)]
    pub start_s: f64,
    #[serde(default)]
    pub end_s: f64,
}

impl EngineTimings {
    /// The stage durations of docs/metrics.md: preprocess, queue (queued → admitted), prefill
    /// (first chunk start → last chunk end), decode (first → last token), postprocess.
    pub fn stages(&self) -> shortlist_measure::record::Stages {
        let span = |a: f64, b: f64| (b >= a && a.is_finite() && b.is_finite()).then_some(b - a);
        let prefill = match (self.prefill_chunks.first(), self.prefill_chunks.last()) {
            (Some(first), Some(last)) => span(first.start_s, last.end_s),
            _ => None,
        };
        let decode = match (self.first_token_s, self.token_s.last()) {
            (Some(first), Some(&last)) => span(first, last),
            _ => None,
        };
        shortlist_measure::record::Stages {
            preprocess: span(self.preprocess_start_s, self.preprocess_end_s),
            queue: span(self.queued_s, self.admitted_s),
            prefill,
            decode,
            postprocess: (self.postprocess_total_s >= 0.0).then_some(self.postprocess_total_s),
            ..Default::default()
        }
    }
}

/// One choice of a chunk.
#[derive(Debug, Deserialize)]
pub struct Choice<'a> {
    #[serde(default, borrow)]
    pub delta: Option<Delta<'a>>,
    /// `/v1/completions` streams text here.
    #[serde(default, borrow)]
    pub text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub finish_reason: Option<Cow<'a, str>>,
    #[serde(default)]
    pub logprobs: Option<Logprobs>,
}

/// A chat delta.
#[derive(Debug, Deserialize)]
pub struct Delta<'a> {
    #[serde(default, borrow)]
    pub content: Option<Cow<'a, str>>,
    /// vLLM, SGLang and DeepSeek name reasoning `reasoning_content`; others `reasoning`.
    #[serde(default, borrow)]
    pub reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub reasoning: Option<Cow<'a, str>>,
}

/// Per-token log probabilities: when present, their count is the chunk's token count.
#[derive(Debug, Deserialize)]
pub struct Logprobs {
    #[serde(default)]
    pub content: Option<Vec<serde::de::IgnoredAny>>,
    #[serde(default)]
    pub tokens: Option<Vec<serde::de::IgnoredAny>>,
}

/// Server usage.
#[derive(Debug, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    #[serde(default)]
    pub completion_tokens: Option<u64>,
    #[serde(default)]
    pub prompt_tokens_details: Option<PromptDetails>,
}

/// Prompt-token details (cached tokens = prefix-cache hits).
#[derive(Debug, Deserialize)]
pub struct PromptDetails {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

/// What one chunk carried, as the load generator counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChunkTokens {
    /// Answer tokens.
    pub output: u32,
    /// Reasoning tokens.
    pub reasoning: u32,
    /// A choice said why it finished.
    pub finished: bool,
}

impl StreamChunk<'_> {
    /// Tokens carried by this chunk. Without log probabilities a chunk with text counts as one
    /// token (engines stream one token per event unless they speculate); the record says the
    /// count is the client's unless the server's usage replaces it.
    pub fn tokens(&self) -> ChunkTokens {
        let mut counted = ChunkTokens::default();
        for choice in &self.choices {
            let by_logprobs = choice
                .logprobs
                .as_ref()
                .and_then(|l| l.content.as_ref().or(l.tokens.as_ref()))
                .map(|v| v.len() as u32)
                .filter(|&n| n > 0);
            let non_empty = |s: &Option<Cow<'_, str>>| s.as_deref().is_some_and(|s| !s.is_empty());
            let (content, reasoning) = match &choice.delta {
                Some(d) => (
                    non_empty(&d.content),
                    non_empty(&d.reasoning_content) || non_empty(&d.reasoning),
                ),
                None => (false, false),
            };
            let content = content || non_empty(&choice.text);
            let n = by_logprobs.unwrap_or(1);
            if content {
                counted.output += n;
            } else if reasoning {
                counted.reasoning += n;
            }
            counted.finished |= choice.finish_reason.is_some();
        }
        counted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn events(input: &[&[u8]]) -> Vec<String> {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for piece in input {
            parser
                .push(piece, |data| {
                    out.push(String::from_utf8_lossy(data).into_owned());
                    Ok(())
                })
                .unwrap();
        }
        out
    }

    #[test]
    fn splits_events_and_ignores_comments() {
        let got = events(&[b": ping\n\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: [DONE]\n\n"]);
        assert_eq!(got, vec!["{\"a\":1}", "[DONE]"]);
        let got = events(&[b"data: a\ndata: b\n\n"]);
        assert_eq!(got, vec!["a\nb"]);
    }

    #[test]
    fn role_only_usage_only_and_empty_chunks_carry_no_tokens() {
        let parse = |s: &str| serde_json::from_str::<StreamChunk<'_>>(s).unwrap().tokens();
        assert_eq!(
            parse(r#"{"choices":[{"delta":{"role":"assistant"}}]}"#).output,
            0
        );
        assert_eq!(parse(r#"{"choices":[{"delta":{"content":""}}]}"#).output, 0);
        assert_eq!(
            parse(r#"{"choices":[],"usage":{"completion_tokens":5}}"#),
            ChunkTokens::default()
        );
        assert_eq!(
            parse(r#"{"choices":[{"delta":{"content":"hi"}}]}"#).output,
            1
        );
        let r = parse(r#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#);
        assert_eq!((r.output, r.reasoning), (0, 1));
        assert_eq!(
            parse(r#"{"choices":[{"text":"x","logprobs":{"tokens":["a","b"]}}]}"#).output,
            2
        );
        assert!(parse(r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#).finished);
    }

    #[test]
    fn engine_timings_become_stages() {
        let chunk: StreamChunk<'_> = serde_json::from_str(
            r#"{"choices":[{"delta":{},"finish_reason":"length"}],"shortlist_timings":{
                "preprocess_start_s":0.0,"preprocess_end_s":0.002,"queued_s":0.002,"admitted_s":0.1,
                "prefill_chunks":[{"start_s":0.1,"end_s":0.2,"tokens":64},{"start_s":0.2,"end_s":0.25,"tokens":10}],
                "first_token_s":0.25,"token_s":[0.25,0.3,0.35],"postprocess_total_s":0.001,"done_s":0.36}}"#,
        )
        .unwrap();
        let stages = chunk.shortlist_timings.unwrap().stages();
        let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-12;
        assert!(close(stages.preprocess, 0.002));
        assert!(close(stages.queue, 0.098));
        assert!(close(stages.prefill, 0.15));
        assert!(close(stages.decode, 0.1));
        assert!(close(stages.postprocess, 0.001));
    }

    proptest! {
        /// However the bytes are cut, the same events come out.
        #[test]
        fn any_split_gives_the_same_events(cuts in proptest::collection::vec(0usize..200, 0..10)) {
            let stream = b"data: {\"x\":\"\xc3\xa9\"}\n\n: c\n\ndata: 2\r\n\r\ndata: [DONE]\n\n".to_vec();
            let mut points: Vec<usize> = cuts.into_iter().map(|c| c % (stream.len() + 1)).collect();
            points.sort_unstable();
            let mut pieces = Vec::new();
            let mut last = 0;
            for p in points {
                pieces.push(&stream[last..p]);
                last = p;
            }
            pieces.push(&stream[last..]);
            prop_assert_eq!(events(&pieces), vec!["{\"x\":\"é\"}".to_owned(), "2".to_owned(), "[DONE]".to_owned()]);
        }
    }
}
