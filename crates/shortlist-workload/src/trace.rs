//! The `shortlist.trace.v1` format: the header, one validated request per line, and a streaming
//! reader and writer over any `BufRead` / `Write`.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use serde::{Deserialize, Deserializer, Serialize};
use shortlist_measure::lines::{LineLimit, MAX_LINE_BYTES};

use crate::error::{WorkloadError, check_format};

/// The format tag (name and major version) this crate reads and writes.
pub const TRACE_FORMAT: &str = "shortlist.trace.v1";

/// How the work arrives (the chapter's online, offline and pipeline-driven work).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Independently timed requests judged per request.
    #[default]
    Online,
    /// A finite dataset judged by completion time.
    Offline,
    /// Work whose rate is coupled to a consumer.
    Pipeline,
}

/// The first line of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceHeader {
    name: String,
    mode: Mode,
    duration_s: Option<f64>,
    source: Option<String>,
    seed: Option<u64>,
    block_size: Option<u32>,
}

/// The header as it travels on the wire; converted to [`TraceHeader`] at the boundary.
#[derive(Debug, Serialize, Deserialize)]
struct HeaderWire {
    format: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    mode: Mode,
    #[serde(default)]
    duration_s: Option<f64>,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    block_size: Option<u32>,
}

impl TraceHeader {
    /// A header with a name and a mode; the optional parts are added with the `with_` methods.
    pub fn new(name: impl Into<String>, mode: Mode) -> Self {
        TraceHeader {
            name: name.into(),
            mode,
            duration_s: None,
            source: None,
            seed: None,
            block_size: None,
        }
    }

    /// The trace's nominal length in seconds: finite and non-negative.
    pub fn with_duration_s(mut self, duration_s: f64) -> Result<Self, FieldError> {
        if !(duration_s.is_finite() && duration_s >= 0.0) {
            return Err(FieldError::new(
                "duration_s",
                format!("must be a finite number ≥ 0, found {duration_s}"),
            ));
        }
        self.duration_s = Some(duration_s);
        Ok(self)
    }

    /// Where the trace came from (a generator, an imported file).
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The seed that generated the trace, for reproduction.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Tokens per `hash_ids` block (Mooncake uses 512); must be ≥ 1.
    pub fn with_block_size(mut self, block_size: u32) -> Result<Self, FieldError> {
        if block_size == 0 {
            return Err(FieldError::new("block_size", "must be ≥ 1"));
        }
        self.block_size = Some(block_size);
        Ok(self)
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn mode(&self) -> Mode {
        self.mode
    }
    pub fn duration_s(&self) -> Option<f64> {
        self.duration_s
    }
    pub fn source(&self) -> Option<&str> {
        self.source.as_deref()
    }
    pub fn seed(&self) -> Option<u64> {
        self.seed
    }
    pub fn block_size(&self) -> Option<u32> {
        self.block_size
    }

    fn to_wire(&self) -> HeaderWire {
        HeaderWire {
            format: TRACE_FORMAT.to_owned(),
            name: self.name.clone(),
            mode: self.mode,
            duration_s: self.duration_s,
            source: self.source.clone(),
            seed: self.seed,
            block_size: self.block_size,
        }
    }

    fn from_wire(wire: HeaderWire) -> Result<Self, FieldError> {
        check_format(&wire.format, TRACE_FORMAT).map_err(|why| FieldError::new("format", why))?;
        let mut header = TraceHeader::new(wire.name, wire.mode);
        if let Some(d) = wire.duration_s {
            header = header.with_duration_s(d)?;
        }
        header.source = wire.source;
        header.seed = wire.seed;
        if let Some(b) = wire.block_size {
            header = header.with_block_size(b)?;
        }
        Ok(header)
    }
}

/// A field that failed validation, before the caller adds the file and line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {why}")]
pub struct FieldError {
    pub field: String,
    pub why: String,
}

impl FieldError {
    pub(crate) fn new(field: impl Into<String>, why: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            why: why.into(),
        }
    }
}

/// A shared prefix: the first `tokens` input tokens are the same for every request of `group`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixFields {
    pub group: String,
    #[serde(deserialize_with = "count")]
    pub tokens: u64,
}

/// One request as plain data: the wire form, and the input to [`Request::new`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RequestFields {
    pub id: String,
    /// Arrival offset in seconds from the start of the trace.
    pub t: f64,
    #[serde(deserialize_with = "count")]
    pub input_tokens: u64,
    #[serde(deserialize_with = "count")]
    pub output_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<PrefixFields>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modality: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<serde_json::Value>,
    /// Mooncake-style prefix blocks: block `k` covers tokens `[k·B, (k+1)·B)` where `B` is the
    /// header's `block_size`; equal ids mean equal content (including everything before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_ids: Option<Vec<u64>>,
    /// The source recorded this request as failed (e.g. BurstGPT rows with 0 response tokens).
    /// Kept, so that a replay sends it and the statistics can count it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub failed: bool,
    /// Source columns that have no field of their own (e.g. BurstGPT's model and log type).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attrs: BTreeMap<String, serde_json::Value>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Token counts: any JSON number that is a non-negative integer, with a message that says so.
fn count<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    n.as_u64().ok_or_else(|| {
        serde::de::Error::custom(format!("must be a non-negative integer, found {n}"))
    })
}

/// A validated request: private fields, built only by [`Request::new`].
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    fields: RequestFields,
}

impl Request {
    /// Validate one request on its own: a non-empty id, a finite `t ≥ 0`, a prefix no longer than
    /// the input and with a group, at most one of `prompt` and `messages`.
    pub fn new(fields: RequestFields) -> Result<Self, FieldError> {
        if fields.id.is_empty() {
            return Err(FieldError::new("id", "must not be empty"));
        }
        if !(fields.t.is_finite() && fields.t >= 0.0) {
            return Err(FieldError::new(
                "t",
                format!("must be a finite number of seconds ≥ 0, found {}", fields.t),
            ));
        }
        if let Some(p) = &fields.prefix {
            if p.group.is_empty() {
                return Err(FieldError::new("prefix.group", "must not be empty"));
            }
            if p.tokens > fields.input_tokens {
                return Err(FieldError::new(
                    "prefix.tokens",
                    format!(
                        "{} shared tokens exceed the request's {} input tokens",
                        p.tokens, fields.input_tokens
                    ),
                ));
            }
        }
        if fields.prompt.is_some() && fields.messages.is_some() {
            return Err(FieldError::new(
                "messages",
                "a request has either `prompt` or `messages`, not both",
            ));
        }
        Ok(Request { fields })
    }

    pub fn fields(&self) -> &RequestFields {
        &self.fields
    }
    pub fn into_fields(self) -> RequestFields {
        self.fields
    }
    pub fn id(&self) -> &str {
        &self.fields.id
    }
    pub fn t(&self) -> f64 {
        self.fields.t
    }
    pub fn input_tokens(&self) -> u64 {
        self.fields.input_tokens
    }
    pub fn output_tokens(&self) -> u64 {
        self.fields.output_tokens
    }
    pub fn prefix(&self) -> Option<&PrefixFields> {
        self.fields.prefix.as_ref()
    }
    pub fn session(&self) -> Option<&str> {
        self.fields.session.as_deref()
    }
    pub fn hash_ids(&self) -> Option<&[u64]> {
        self.fields.hash_ids.as_deref()
    }
    pub fn failed(&self) -> bool {
        self.fields.failed
    }
}

/// Checks that need the previous request or the header: sorted `t`, `hash_ids` with a block size.
#[derive(Debug, Clone)]
struct OrderCheck {
    last_t: f64,
    last_line: u64,
    has_block_size: bool,
}

impl OrderCheck {
    fn new(header: &TraceHeader) -> Self {
        OrderCheck {
            last_t: 0.0,
            last_line: 0,
            has_block_size: header.block_size.is_some(),
        }
    }

    fn check(&mut self, req: &Request, line: u64) -> Result<(), FieldError> {
        if self.last_line > 0 && req.t() < self.last_t {
            return Err(FieldError::new(
                "t",
                format!(
                    "{} is earlier than the previous request's t = {} (line {}); a trace is sorted by t",
                    req.t(),
                    self.last_t,
                    self.last_line
                ),
            ));
        }
        if req.hash_ids().is_some() && !self.has_block_size {
            return Err(FieldError::new(
                "hash_ids",
                "needs a `block_size` in the header",
            ));
        }
        self.last_t = req.t();
        self.last_line = line;
        Ok(())
    }
}

/// Reads a trace one request at a time; memory does not grow with the trace. A line longer than
/// [`MAX_LINE_BYTES`] (or the limit given to [`TraceReader::with_max_line_bytes`]) is refused
/// with its number before it is held in memory: a trace of a billion requests on one line costs
/// the limit, not the line.
#[derive(Debug)]
pub struct TraceReader<R> {
    input: LineLimit<R>,
    source_name: String,
    header: TraceHeader,
    line: u64,
    buf: String,
    order: OrderCheck,
    done: bool,
}

impl<R: BufRead> TraceReader<R> {
    /// Read and check the header. `source_name` names the input in every error.
    pub fn new(input: R, source_name: impl Into<String>) -> Result<Self, WorkloadError> {
        Self::with_max_line_bytes(input, source_name, MAX_LINE_BYTES)
    }

    /// [`TraceReader::new`] with another limit on the length of a line, in bytes.
    pub fn with_max_line_bytes(
        input: R,
        source_name: impl Into<String>,
        max_line_bytes: usize,
    ) -> Result<Self, WorkloadError> {
        let source_name = source_name.into();
        let mut input = LineLimit::new(input, max_line_bytes);
        let mut buf = String::new();
        let mut line = 0;
        loop {
            buf.clear();
            let n = input
                .read_line(&mut buf)
                .map_err(|e| WorkloadError::io(&source_name, e))?;
            if n == 0 {
                return Err(WorkloadError::unusable(
                    &source_name,
                    "empty file: a trace starts with its header line",
                ));
            }
            line += 1;
            if !buf.trim().is_empty() {
                break;
            }
        }
        let wire: HeaderWire = parse_json(&buf, &source_name, line)?;
        let header = TraceHeader::from_wire(wire)
            .map_err(|e| WorkloadError::at(&source_name, line, e.field, e.why))?;
        let order = OrderCheck::new(&header);
        Ok(TraceReader {
            input,
            source_name,
            header,
            line,
            buf,
            order,
            done: false,
        })
    }

    pub fn header(&self) -> &TraceHeader {
        &self.header
    }

    /// The number of the line read last (1 is the header).
    pub fn line(&self) -> u64 {
        self.line
    }

    fn next_request(&mut self) -> Result<Option<Request>, WorkloadError> {
        loop {
            self.buf.clear();
            let n = self
                .input
                .read_line(&mut self.buf)
                .map_err(|e| WorkloadError::io(&self.source_name, e))?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            if !self.buf.trim().is_empty() {
                break;
            }
        }
        let fields: RequestFields = parse_json(&self.buf, &self.source_name, self.line)?;
        let at = |e: FieldError| WorkloadError::at(&self.source_name, self.line, e.field, e.why);
        let req = Request::new(fields).map_err(at)?;
        self.order.check(&req, self.line).map_err(at)?;
        Ok(Some(req))
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<Request, WorkloadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.next_request().transpose();
        // Stop after the end or the first error: what follows a bad line is not trusted.
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
        }
        item
    }
}

/// Parse one JSON line, naming the field that failed.
fn parse_json<T: for<'de> Deserialize<'de>>(
    text: &str,
    source_name: &str,
    line: u64,
) -> Result<T, WorkloadError> {
    let mut de = serde_json::Deserializer::from_str(text);
    match serde_path_to_error::deserialize(&mut de) {
        Ok(v) => Ok(v),
        Err(err) => {
            let path = err.path().to_string();
            let inner = err.into_inner();
            // serde_json appends " at line 1 column N"; the line is ours, the column is noise.
            let msg = inner.to_string();
            let why = msg.split(" at line ").next().unwrap_or(&msg).to_owned();
            let missing = why
                .strip_prefix("missing field `")
                .and_then(|r| r.split('`').next());
            let field = match (missing, path.as_str()) {
                (Some(name), "." | "") => name.to_owned(),
                (Some(name), parent) => format!("{parent}.{name}"),
                (None, "." | "") => "(line)".to_owned(),
                (None, _) => path,
            };
            Err(WorkloadError::at(source_name, line, field, why))
        }
    }
}

/// Writes a trace one request at a time, refusing anything a reader would reject.
#[derive(Debug)]
pub struct TraceWriter<W: Write> {
    out: W,
    sink_name: String,
    order: OrderCheck,
    written: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Write the header line. `sink_name` names the output in every error.
    pub fn new(
        mut out: W,
        header: &TraceHeader,
        sink_name: impl Into<String>,
    ) -> Result<Self, WorkloadError> {
        let sink_name = sink_name.into();
        write_line(&mut out, &header.to_wire(), &sink_name)?;
        Ok(TraceWriter {
            out,
            sink_name,
            order: OrderCheck::new(header),
            written: 0,
        })
    }

    /// Append one request; it must not be earlier than the one before.
    pub fn write(&mut self, req: &Request) -> Result<(), WorkloadError> {
        let line = self.written + 2;
        self.order
            .check(req, line)
            .map_err(|e| WorkloadError::at(&self.sink_name, line, e.field, e.why))?;
        write_line(&mut self.out, req.fields(), &self.sink_name)?;
        self.written += 1;
        Ok(())
    }

    /// Requests written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Flush and return the output.
    pub fn finish(mut self) -> Result<W, WorkloadError> {
        self.out
            .flush()
            .map_err(|e| WorkloadError::io(&self.sink_name, e))?;
        Ok(self.out)
    }
}

fn write_line<T: Serialize>(
    out: &mut impl Write,
    value: &T,
    sink_name: &str,
) -> Result<(), WorkloadError> {
    let io = |e: std::io::Error| WorkloadError::io(sink_name, e);
    serde_json::to_writer(&mut *out, value)
        .map_err(|e| WorkloadError::unusable(sink_name, e.to_string()))?;
    out.write_all(b"\n").map_err(io)
}

/// Read a whole trace into memory (for statistics and fitting, which need every request).
pub fn read_all<R: BufRead>(
    input: R,
    source_name: &str,
) -> Result<(TraceHeader, Vec<Request>), WorkloadError> {
    let reader = TraceReader::new(input, source_name)?;
    let header = reader.header().clone();
    let requests = reader.collect::<Result<Vec<_>, _>>()?;
    Ok((header, requests))
}

/// Write a whole trace.
pub fn write_all<W: Write>(
    out: W,
    header: &TraceHeader,
    requests: &[Request],
    sink_name: &str,
) -> Result<W, WorkloadError> {
    let mut w = TraceWriter::new(out, header, sink_name)?;
    for r in requests {
        w.write(r)?;
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<(TraceHeader, Vec<Request>), WorkloadError> {
        read_all(text.as_bytes(), "t.jsonl")
    }

    const HEAD: &str = r#"{"format":"shortlist.trace.v1","name":"x","mode":"online","duration_s":3,"source":null,"seed":1}"#;

    #[test]
    fn round_trip_keeps_every_field() {
        let text = format!(
            "{HEAD}\n{}\n{}\n",
            r#"{"id":"r1","t":0.5,"input_tokens":1200,"output_tokens":200,"prefix":{"group":"g3","tokens":800},"tenant":"acme","session":"s9","turn":2,"priority":0,"modality":"text","prompt":"hi"}"#,
            r#"{"id":"r2","t":2.125,"input_tokens":5,"output_tokens":0,"failed":true,"attrs":{"model":"GPT-4"}}"#
        );
        let (h, reqs) = read(&text).unwrap();
        assert_eq!(h.seed(), Some(1));
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].prefix().unwrap().tokens, 800);
        assert!(reqs[1].failed());
        let out = write_all(Vec::new(), &h, &reqs, "out").unwrap();
        let (h2, reqs2) = read(std::str::from_utf8(&out).unwrap()).unwrap();
        assert_eq!(h, h2);
        assert_eq!(reqs, reqs2);
    }

    /// `count` copies of `item` with no newline between them, made as they are read.
    struct Repeated {
        item: &'static [u8],
        left: u64,
        at: usize,
    }

    impl std::io::Read for Repeated {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            if self.left == 0 {
                return Ok(0);
            }
            let n = (self.item.len() - self.at).min(out.len());
            out[..n].copy_from_slice(&self.item[self.at..self.at + n]);
            self.at += n;
            if self.at == self.item.len() {
                self.at = 0;
                self.left -= 1;
            }
            Ok(n)
        }
    }

    #[test]
    fn a_billion_requests_on_one_line_are_refused_after_the_line_limit() {
        use std::io::Read as _;
        // About 50 GB if it were read whole: the reader must stop at its line limit.
        let line = Repeated {
            item: br#"{"id":"r","t":0,"input_tokens":1,"output_tokens":1}"#,
            left: 1_000_000_000,
            at: 0,
        };
        let head = format!("{HEAD}\n");
        let input = std::io::BufReader::new(head.as_bytes().chain(line));
        let mut reader = TraceReader::new(input, "one-line.jsonl").expect("the header is fine");
        let err = reader.next().expect("an item").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("one-line.jsonl: line 2 is longer than 33554432 bytes"),
            "{err}"
        );
        assert!(reader.next().is_none(), "nothing after the error");
    }

    #[test]
    fn unsorted_t_names_line_and_field() {
        let text = format!(
            "{HEAD}\n{}\n{}\n",
            r#"{"id":"a","t":2.0,"input_tokens":1,"output_tokens":1}"#,
            r#"{"id":"b","t":1.5,"input_tokens":1,"output_tokens":1}"#
        );
        let err = read(&text).unwrap_err().to_string();
        assert!(err.starts_with("t.jsonl:3: field `t`:"), "{err}");
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn negative_tokens_are_rejected_with_the_field() {
        let text = format!(
            "{HEAD}\n{}\n",
            r#"{"id":"a","t":0,"input_tokens":-5,"output_tokens":1}"#
        );
        let err = read(&text).unwrap_err().to_string();
        assert_eq!(
            err,
            "t.jsonl:2: field `input_tokens`: must be a non-negative integer, found -5"
        );
        let text = format!(
            "{HEAD}\n{}\n",
            r#"{"id":"a","t":-1,"input_tokens":5,"output_tokens":1}"#
        );
        let err = read(&text).unwrap_err().to_string();
        assert!(err.starts_with("t.jsonl:2: field `t`:"), "{err}");
    }

    #[test]
    fn unknown_major_version_is_refused() {
        let err = read(r#"{"format":"shortlist.trace.v2","name":"x"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unsupported version \"shortlist.trace.v2\""),
            "{err}"
        );
        let ok = read(r#"{"format":"shortlist.trace.v1.3","name":"x"}"#);
        assert!(ok.is_ok());
        let err = read(r#"{"format":"shortlist.records.v1"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a trace"), "{err}");
    }

    #[test]
    fn hash_ids_need_a_block_size_and_prefix_fits_input() {
        let text = format!(
            "{HEAD}\n{}\n",
            r#"{"id":"a","t":0,"input_tokens":5,"output_tokens":1,"hash_ids":[1]}"#
        );
        assert!(
            read(&text)
                .unwrap_err()
                .to_string()
                .contains("field `hash_ids`")
        );
        let text = format!(
            "{HEAD}\n{}\n",
            r#"{"id":"a","t":0,"input_tokens":5,"output_tokens":1,"prefix":{"group":"g","tokens":6}}"#
        );
        assert!(
            read(&text)
                .unwrap_err()
                .to_string()
                .contains("field `prefix.tokens`")
        );
    }

    #[test]
    fn garbage_and_empty_inputs_are_errors_not_panics() {
        assert!(read("").is_err());
        assert!(
            read("not json")
                .unwrap_err()
                .to_string()
                .starts_with("t.jsonl:1:")
        );
        let text = format!("{HEAD}\n{{\"id\":\"a\",\"t\":0}}\n");
        let err = read(&text).unwrap_err().to_string();
        assert!(err.contains("input_tokens"), "{err}");
    }

    #[test]
    fn writer_refuses_unsorted_requests() {
        let h = TraceHeader::new("x", Mode::Online);
        let mk = |id: &str, t: f64| {
            Request::new(RequestFields {
                id: id.into(),
                t,
                input_tokens: 1,
                output_tokens: 1,
                ..Default::default()
            })
            .unwrap()
        };
        let mut w = TraceWriter::new(Vec::new(), &h, "out").unwrap();
        w.write(&mk("a", 1.0)).unwrap();
        assert!(w.write(&mk("b", 0.5)).is_err());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn fields() -> impl Strategy<Value = RequestFields> {
            (
                "[a-z0-9]{1,8}",
                0.0f64..1e6,
                0u64..1_000_000,
                0u64..100_000,
                proptest::option::of(("[a-z]{1,4}", 0u64..1000)),
                proptest::option::of("[a-z ]{0,12}"),
                proptest::option::of((any::<u32>(), any::<i32>())),
                proptest::option::of(proptest::collection::vec(any::<u64>(), 0..5)),
                any::<bool>(),
            )
                .prop_map(
                    |(id, t, input, output, prefix, tenant, turn, hash_ids, failed)| {
                        RequestFields {
                            id,
                            t,
                            input_tokens: input + 1000,
                            output_tokens: output,
                            prefix: prefix.map(|(group, tokens)| PrefixFields { group, tokens }),
                            tenant,
                            session: turn.map(|(turn, _)| format!("s{turn}")),
                            turn: turn.map(|(turn, _)| turn),
                            priority: turn.map(|(_, p)| p),
                            hash_ids,
                            failed,
                            ..Default::default()
                        }
                    },
                )
        }

        proptest! {
            #[test]
            fn any_sorted_trace_round_trips(mut reqs in proptest::collection::vec(fields(), 0..30), seed in any::<u64>()) {
                reqs.sort_by(|a, b| a.t.total_cmp(&b.t));
                let reqs: Vec<Request> = reqs.into_iter().map(|f| Request::new(f).unwrap()).collect();
                let header = TraceHeader::new("p", Mode::Offline).with_seed(seed).with_block_size(512).unwrap();
                let out = write_all(Vec::new(), &header, &reqs, "out").unwrap();
                let (h2, back) = read_all(&out[..], "out").unwrap();
                prop_assert_eq!(h2, header);
                prop_assert_eq!(back, reqs);
            }

            #[test]
            fn arbitrary_text_never_panics(text in "\\PC{0,200}", lines in proptest::collection::vec("\\PC{0,80}", 0..5)) {
                let _ = read_all(text.as_bytes(), "x");
                let doc = format!("{}\n{}", r#"{"format":"shortlist.trace.v1"}"#, lines.join("\n"));
                let _ = read_all(doc.as_bytes(), "x");
            }
        }
    }
}
