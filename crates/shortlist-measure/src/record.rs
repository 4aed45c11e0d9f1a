//! Request records (`shortlist.records.v1`): the wire form, its validation, and a streaming reader.
//!
//! A record file is a header line followed by one line per request *attempt*. The reader checks
//! every line as it streams and reports the first problem with its line number and field, so a
//! million-record file is never held in memory.

use std::borrow::Cow;
use std::io::BufRead;

use serde::{Deserialize, Serialize};

use crate::error::{MeasureError, check_format};
use crate::lines::{LineLimit, MAX_LINE_BYTES};

/// The format tag of request-records files.
pub const RECORDS_FORMAT: &str = "shortlist.records.v1";

/// Which load-generation loop produced a run. Every load result carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadLoop {
    /// Arrivals follow the trace's clock whatever the server does.
    Open,
    /// A fixed population of clients, each waiting for its answer before sending again.
    Closed,
}

impl LoadLoop {
    /// The label printed beside every load result.
    pub fn label(self, concurrency_cap: Option<u32>) -> String {
        match (self, concurrency_cap) {
            (LoadLoop::Open, None) => "open loop".to_owned(),
            (LoadLoop::Open, Some(cap)) => format!("open loop with a concurrency cap of {cap}"),
            (LoadLoop::Closed, _) => "closed loop".to_owned(),
        }
    }
}

/// The first line of a records file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordsHeader {
    /// Always [`RECORDS_FORMAT`].
    pub format: String,
    /// Open or closed loop.
    #[serde(rename = "loop")]
    pub load_loop: LoadLoop,
    /// The measurement window, seconds since the run started: `[start, end]`.
    pub window_s: [f64; 2],
    /// What was measured (a URL, `engine:MODEL`, `sim:...`).
    #[serde(default)]
    pub target: serde_json::Value,
    /// The workload trace replayed, if any.
    #[serde(default)]
    pub trace: serde_json::Value,
    /// When the run started (RFC 3339).
    #[serde(default)]
    pub started_at: Option<String>,
    /// Open loop with a cap on requests in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_cap: Option<u32>,
    /// Closed loop: the client population.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<u32>,
    /// One part of a load step split across load workers (absent for a whole step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<RecordsPart>,
}

/// Which share of a split load step a records file holds: arrival `i` of the step's schedule
/// went to part `i mod of`, and every part's clock starts at the agreed instant `start_at`, so
/// the parts' times share one origin (up to the hosts' clock offset).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordsPart {
    /// This part, from 0.
    pub index: u32,
    /// Parts in all.
    pub of: u32,
    /// The agreed start instant (RFC 3339, UTC).
    pub start_at: String,
    /// The host that sent this part's requests.
    pub host: String,
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Error,
    Timeout,
    Cancelled,
}

/// Where `output_tokens` came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenSource {
    /// The server's usage report.
    Server,
    /// Counted by the client from the stream.
    Client,
}

/// Server-side stage durations, in seconds, where the target reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Stages {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preprocess: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postprocess: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<f64>,
}

impl Stages {
    fn fields(&self) -> [(&'static str, Option<f64>); 7] {
        [
            ("ingress", self.ingress),
            ("queue", self.queue),
            ("preprocess", self.preprocess),
            ("prefill", self.prefill),
            ("decode", self.decode),
            ("postprocess", self.postprocess),
            ("egress", self.egress),
        ]
    }
}

/// One streamed chunk that carried at least one generated token: `[arrival_s, tokens]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Chunk(pub f64, pub u32);

impl Chunk {
    /// Arrival time, seconds since the run started.
    pub fn at(self) -> f64 {
        self.0
    }
    /// Tokens the chunk carried (at least one).
    pub fn tokens(self) -> u32 {
        self.1
    }
}

/// One request attempt as it appears on a line of a records file.
///
/// Strings borrow from the line where they can, so that reading a large file allocates little.
/// Unknown fields are ignored (the format may gain fields); known fields are checked by
/// [`Attempt::validate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    #[serde(default = "first_attempt")]
    pub attempt: u32,
    #[serde(default, borrow)]
    pub retry_of: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub tenant: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub prefix_group: Option<Cow<'a, str>>,
    pub scheduled_s: f64,
    #[serde(default)]
    pub sent_s: Option<f64>,
    #[serde(default)]
    pub chunks: Vec<Chunk>,
    #[serde(default)]
    pub last_token_s: Option<f64>,
    /// When the attempt ended, whatever its status (last byte, error or timeout). Optional;
    /// without it the end is the last token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_s: Option<f64>,
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default = "client_source")]
    pub output_tokens_source: TokenSource,
    /// The output tokens the request asked for (its `max_tokens`), where the client wrote it:
    /// the report sets what was generated against it, since a server that stops early
    /// makes the load lighter than the workload's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    pub status: Status,
    #[serde(default, borrow)]
    pub error: Option<Cow<'a, str>>,
    #[serde(default)]
    pub valid: Option<bool>,
    #[serde(default)]
    pub prefix_hit_tokens: Option<u64>,
    #[serde(default)]
    pub stages: Option<Stages>,
    /// Open loop with a concurrency cap: how long the attempt waited for a free slot before it
    /// was sent. That wait is the cap's queue, not the client falling behind its schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap_queue_s: Option<f64>,
    /// Time to first *output* token: the first chunk carrying answer (not reasoning) tokens.
    /// Equal to the first chunk for models that do not reason; absent when the target does not
    /// tell the two apart or no answer token came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_output_s: Option<f64>,
    /// Warm-up traffic: read, counted as excluded, and left out of every figure.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warmup: bool,
}

fn first_attempt() -> u32 {
    1
}

fn client_source() -> TokenSource {
    TokenSource::Client
}

/// Tolerance for clock comparisons within one record: times are written with finite decimals.
const CLOCK_EPSILON_S: f64 = 1e-9;

impl Attempt<'_> {
    /// Check the record's internal consistency. Returns the offending field and why.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        fn time(field: &'static str, value: f64) -> Result<(), (&'static str, String)> {
            if !value.is_finite() || value < 0.0 {
                return Err((field, format!("{value} is not a time (finite seconds ≥ 0)")));
            }
            Ok(())
        }
        if self.id.is_empty() {
            return Err(("id", "empty request id".to_owned()));
        }
        if self.attempt == 0 {
            return Err(("attempt", "attempts are numbered from 1".to_owned()));
        }
        time("scheduled_s", self.scheduled_s)?;
        let floor = match self.sent_s {
            Some(sent) => {
                time("sent_s", sent)?;
                if sent + CLOCK_EPSILON_S < self.scheduled_s {
                    return Err((
                        "sent_s",
                        format!(
                            "sent at {sent} s, before it was scheduled at {} s",
                            self.scheduled_s
                        ),
                    ));
                }
                sent
            }
            None => {
                if !self.chunks.is_empty() {
                    return Err((
                        "sent_s",
                        "missing, but the attempt received chunks".to_owned(),
                    ));
                }
                self.scheduled_s
            }
        };
        let mut previous = floor;
        for (index, chunk) in self.chunks.iter().enumerate() {
            let at = chunk.at();
            if !at.is_finite() {
                return Err(("chunks", format!("chunk {index} has arrival time {at}")));
            }
            if at + CLOCK_EPSILON_S < previous {
                return Err((
                    "chunks",
                    if index == 0 {
                        format!(
                            "chunk 0 arrives at {at} s, before the request was sent at {floor} s"
                        )
                    } else {
                        format!(
                            "chunk {index} arrives at {at} s, before chunk {} at {previous} s",
                            index - 1
                        )
                    },
                ));
            }
            if chunk.tokens() == 0 {
                return Err((
                    "chunks",
                    format!(
                        "chunk {index} carries 0 tokens; role-only, usage-only and empty chunks are not chunks"
                    ),
                ));
            }
            previous = at;
        }
        match (self.last_token_s, self.chunks.last()) {
            (Some(last), Some(chunk)) => {
                time("last_token_s", last)?;
                if chunk.at() > last + CLOCK_EPSILON_S {
                    return Err((
                        "chunks",
                        format!(
                            "a chunk arrives at {} s, after the last token at {last} s",
                            chunk.at()
                        ),
                    ));
                }
                if chunk.at() + CLOCK_EPSILON_S < last {
                    return Err((
                        "last_token_s",
                        format!(
                            "{last} s, but the last token-carrying chunk arrived at {} s",
                            chunk.at()
                        ),
                    ));
                }
            }
            (Some(last), None) => {
                return Err((
                    "last_token_s",
                    format!("{last} s, but the attempt has no token-carrying chunks"),
                ));
            }
            (None, Some(_)) => {
                return Err((
                    "last_token_s",
                    "missing, but the attempt received chunks".to_owned(),
                ));
            }
            (None, None) => {}
        }
        if let Some(end) = self.end_s {
            time("end_s", end)?;
            if end + CLOCK_EPSILON_S < previous {
                return Err((
                    "end_s",
                    format!("{end} s, before the attempt's last event at {previous} s"),
                ));
            }
        }
        if let Some(first) = self.first_output_s {
            time("first_output_s", first)?;
            let first_chunk = self.chunks.first().map(|c| c.at());
            let inside = first_chunk.is_some_and(|c1| first + CLOCK_EPSILON_S >= c1)
                && self
                    .last_token_s
                    .is_some_and(|l| first <= l + CLOCK_EPSILON_S);
            if !inside {
                return Err((
                    "first_output_s",
                    format!(
                        "{first} s, outside the attempt's token-carrying chunks (first {:?} s, last {:?} s)",
                        first_chunk, self.last_token_s
                    ),
                ));
            }
        }
        if let Some(wait) = self.cap_queue_s
            && (!wait.is_finite() || wait < 0.0)
        {
            return Err((
                "cap_queue_s",
                format!("{wait} is not a duration (finite seconds ≥ 0)"),
            ));
        }
        if let Some(hit) = self.prefix_hit_tokens
            && let Some(input) = self.input_tokens
            && hit > input
        {
            return Err((
                "prefix_hit_tokens",
                format!("{hit} cached prompt tokens, but the prompt has only {input}"),
            ));
        }
        if let Some(stages) = &self.stages {
            for (name, value) in stages.fields() {
                if let Some(v) = value
                    && (!v.is_finite() || v < 0.0)
                {
                    return Err(("stages", format!("stage {name} lasted {v} s")));
                }
            }
        }
        Ok(())
    }

    /// The user request this attempt belongs to: the original request's id for a retry.
    pub fn user_request(&self) -> &str {
        self.retry_of.as_deref().unwrap_or(&self.id)
    }

    /// Whether this attempt is the user's original request (not a retry of one).
    pub fn is_original(&self) -> bool {
        self.retry_of.is_none()
    }

    /// First-token time c1, if any token arrived.
    pub fn first_token_s(&self) -> Option<f64> {
        self.chunks.first().map(|c| c.at())
    }

    /// When the attempt left the system: `end_s`, else the last token. `None` when unknown.
    pub fn end(&self) -> Option<f64> {
        self.end_s.or(self.last_token_s)
    }

    /// Tokens counted by the client from the stream.
    pub fn client_token_count(&self) -> u64 {
        self.chunks.iter().map(|c| u64::from(c.tokens())).sum()
    }
}

/// Reads a records file line by line: first the header, then attempts. A line longer than
/// [`MAX_LINE_BYTES`] (or the limit given to [`RecordsReader::with_max_line_bytes`]) is refused
/// with its line number before it is held in memory.
#[derive(Debug)]
pub struct RecordsReader<R> {
    source: String,
    reader: LineLimit<R>,
    line: String,
    line_number: u64,
    header: RecordsHeader,
}

impl<R: BufRead> RecordsReader<R> {
    /// Read and check the header. `source` names the input in error messages (a file path).
    pub fn new(source: impl Into<String>, reader: R) -> Result<Self, MeasureError> {
        Self::with_max_line_bytes(source, reader, MAX_LINE_BYTES)
    }

    /// [`RecordsReader::new`] with another limit on the length of a line, in bytes.
    pub fn with_max_line_bytes(
        source: impl Into<String>,
        reader: R,
        max_line_bytes: usize,
    ) -> Result<Self, MeasureError> {
        let source = source.into();
        let mut reader = LineLimit::new(reader, max_line_bytes);
        let mut line = String::new();
        let read = reader
            .read_line(&mut line)
            .map_err(|e| MeasureError::io(&source, e))?;
        if read == 0 {
            return Err(MeasureError::at(
                &source,
                1,
                "format",
                "the file is empty: expected a header line",
            ));
        }
        let value: serde_json::Value = serde_json::from_str(&line)
            .map_err(|e| MeasureError::at(&source, 1, "header", format!("not JSON: {e}")))?;
        let format = value
            .get("format")
            .and_then(|f| f.as_str())
            .unwrap_or_default();
        check_format(format, RECORDS_FORMAT)
            .map_err(|why| MeasureError::at(&source, 1, "format", why))?;
        let header: RecordsHeader = parse_line(line.trim_end())
            .map_err(|(field, why)| MeasureError::at(&source, 1, field, why))?;
        let [start, end] = header.window_s;
        if !(start.is_finite() && end.is_finite() && start >= 0.0 && end > start) {
            return Err(MeasureError::at(
                &source,
                1,
                "window_s",
                format!("[{start}, {end}] is not a window (0 ≤ start < end)"),
            ));
        }
        Ok(Self {
            source,
            reader,
            line,
            line_number: 1,
            header,
        })
    }

    /// The file's header.
    pub fn header(&self) -> &RecordsHeader {
        &self.header
    }

    /// Visit every attempt in file order. The attempt borrows the current line, so the visitor sees
    /// each record once and keeps what it needs.
    pub fn for_each(mut self, mut visit: impl FnMut(&Attempt<'_>)) -> Result<u64, MeasureError> {
        let mut count = 0;
        loop {
            self.line.clear();
            let read = self
                .reader
                .read_line(&mut self.line)
                .map_err(|e| MeasureError::io(&self.source, e))?;
            if read == 0 {
                return Ok(count);
            }
            self.line_number += 1;
            let text = self.line.trim_end();
            if text.is_empty() {
                continue;
            }
            let attempt: Attempt<'_> = parse_line(text).map_err(|(field, why)| {
                MeasureError::at(&self.source, self.line_number, field, why)
            })?;
            attempt.validate().map_err(|(field, why)| {
                MeasureError::at(&self.source, self.line_number, field, why)
            })?;
            visit(&attempt);
            count += 1;
        }
    }
}

/// Parse one JSON line. On failure the line is parsed again with a path-tracking deserializer, so
/// the error names the field (`chunks[3]`, `stages.queue`) without slowing the common path.
pub(crate) fn parse_line<'a, T: Deserialize<'a>>(text: &'a str) -> Result<T, (String, String)> {
    serde_json::from_str(text).map_err(|err| {
        let mut de = serde_json::Deserializer::from_str(text);
        match serde_path_to_error::deserialize::<_, T>(&mut de) {
            Err(located) => {
                let path = located.path().to_string();
                let field = if path.is_empty() || path == "." {
                    "record".to_owned()
                } else {
                    path
                };
                (field, located.into_inner().to_string())
            }
            Ok(_) => ("record".to_owned(), err.to_string()),
        }
    })
}

#[cfg(test)]
mod tests {
    use std::io::{BufReader, Read};

    use super::*;

    const HEADER: &str =
        "{\"format\": \"shortlist.records.v1\", \"loop\": \"open\", \"window_s\": [0, 2]}\n";

    #[test]
    fn a_100_mb_line_is_refused_by_number_after_the_limit() {
        // 100 MB of one JSON array with no newline, streamed: never built in the test either.
        let line = std::io::repeat(b'[').take(100_000_000);
        let input = BufReader::new(HEADER.as_bytes().chain(line));
        let reader = RecordsReader::new("big.records.jsonl", input).expect("the header is fine");
        let err = reader.for_each(|_| {}).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("big.records.jsonl: line 2 is longer than 33554432 bytes"),
            "{err}"
        );
    }

    #[test]
    fn a_header_without_a_newline_is_refused_at_the_given_limit() {
        let input = BufReader::new(std::io::repeat(b' ').take(10_000));
        let err = RecordsReader::with_max_line_bytes("x.jsonl", input, 100).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("x.jsonl: line 1 is longer than 100 bytes"),
            "{err}"
        );
    }
}
