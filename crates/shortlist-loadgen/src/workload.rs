//! What a run replays: the requests of a `shortlist.trace.v1` file with their arrival offsets.
//!
//! Traces are read by `shortlist-workload`'s streaming reader (line-numbered errors, order
//! checks); this module keeps what the load generator needs of each request.

use std::io::BufRead;
use std::path::Path;

use shortlist_workload::trace::{Request as TraceRequest, TraceHeader, TraceReader};

use crate::error::LoadgenError;

/// A shared prompt prefix: requests of one group start with the same `tokens` tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prefix {
    group: String,
    tokens: u32,
}

impl Prefix {
    /// A prefix of `tokens` tokens shared by the requests of `group`.
    pub fn new(group: impl Into<String>, tokens: u32) -> Self {
        Prefix {
            group: group.into(),
            tokens,
        }
    }
    /// The group's name.
    pub fn group(&self) -> &str {
        &self.group
    }
    /// The shared length in tokens.
    pub fn tokens(&self) -> u32 {
        self.tokens
    }
}

/// One request to send: its identity, its size and, where the trace has them, its text.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSpec {
    id: String,
    input_tokens: u32,
    max_tokens: u32,
    prefix: Option<Prefix>,
    tenant: Option<String>,
    prompt: Option<String>,
    messages: Option<serde_json::Value>,
    /// Text that makes a synthetic prompt this step's own (see [`Workload::salted`]).
    salt: Option<std::sync::Arc<str>>,
}

impl RequestSpec {
    /// A request of `input_tokens` prompt tokens asking for `max_tokens` output tokens. A prefix
    /// longer than the prompt is cut to the prompt.
    pub fn new(id: impl Into<String>, input_tokens: u32, max_tokens: u32) -> Self {
        RequestSpec {
            id: id.into(),
            input_tokens,
            max_tokens,
            prefix: None,
            tenant: None,
            prompt: None,
            messages: None,
            salt: None,
        }
    }
    /// The same request sharing `prefix`.
    pub fn with_prefix(mut self, prefix: Prefix) -> Self {
        let tokens = prefix.tokens.min(self.input_tokens);
        self.prefix = Some(Prefix { tokens, ..prefix });
        self
    }
    /// The same request on behalf of `tenant`.
    pub fn with_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }
    /// The same request with its prompt text.
    pub fn with_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.prompt = Some(prompt.into());
        self
    }
    /// The same request with its chat messages (OpenAI form).
    pub fn with_messages(mut self, messages: serde_json::Value) -> Self {
        self.messages = Some(messages);
        self
    }
    /// The request id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// Prompt tokens.
    pub fn input_tokens(&self) -> u32 {
        self.input_tokens
    }
    /// Output tokens asked for.
    pub fn max_tokens(&self) -> u32 {
        self.max_tokens
    }
    /// The shared prefix, if any.
    pub fn prefix(&self) -> Option<&Prefix> {
        self.prefix.as_ref()
    }
    /// The tenant, if any.
    pub fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }
    /// The prompt text, if the trace has one.
    pub fn prompt(&self) -> Option<&str> {
        self.prompt.as_deref()
    }
    /// The chat messages, if the trace has them.
    pub fn messages(&self) -> Option<&serde_json::Value> {
        self.messages.as_ref()
    }
    /// The step's salt of a synthetic prompt, if any.
    pub fn salt(&self) -> Option<&str> {
        self.salt.as_deref()
    }
}

/// A request and when it arrives, seconds after the run starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrival {
    /// Arrival offset in seconds.
    pub t: f64,
    /// The request.
    pub request: RequestSpec,
}

/// The requests of a run in arrival order, with the length of the window they arrive in.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    name: String,
    arrivals: Vec<Arrival>,
    duration_s: f64,
}

impl Workload {
    /// A workload from arrivals sorted by time. `duration_s` is the arrival window `[0, d)`;
    /// `None` takes the last arrival plus one mean gap, so that `n` evenly spaced requests at
    /// rate `r` span `n/r`. A window that ends at or before the last arrival (an imported trace's
    /// header gives the span of its source, which ends *at* its last request) is taken the same
    /// way: a request scheduled on the window's end would be outside every measured population.
    pub fn new(
        name: impl Into<String>,
        arrivals: Vec<Arrival>,
        duration_s: Option<f64>,
    ) -> Result<Self, LoadgenError> {
        for (index, pair) in arrivals.windows(2).enumerate() {
            if pair[1].t < pair[0].t {
                return Err(LoadgenError::option(
                    "workload",
                    format!(
                        "arrival {} at {} s comes before arrival {index} at {} s",
                        index + 1,
                        pair[1].t,
                        pair[0].t
                    ),
                ));
            }
        }
        if let Some(bad) = arrivals.iter().find(|a| !(a.t.is_finite() && a.t >= 0.0)) {
            return Err(LoadgenError::option(
                "workload",
                format!("request {} arrives at {} s", bad.request.id, bad.t),
            ));
        }
        let last = arrivals.last().map_or(0.0, |a| a.t);
        let natural = if arrivals.len() > 1 {
            last * arrivals.len() as f64 / (arrivals.len() - 1) as f64
        } else {
            last
        };
        let duration_s = match duration_s {
            Some(d) if d.is_finite() && d > last => d,
            _ if natural > 0.0 => natural,
            _ => 1.0,
        };
        Ok(Workload {
            name: name.into(),
            arrivals,
            duration_s,
        })
    }

    /// `n` requests evenly spaced at `rate` per second, each `input` prompt tokens and `output`
    /// output tokens (calibration and tests).
    pub fn constant_rate(n: usize, rate: f64, input: u32, output: u32) -> Self {
        let arrivals = (0..n)
            .map(|i| Arrival {
                t: i as f64 / rate,
                request: RequestSpec::new(format!("r{i}"), input, output),
            })
            .collect();
        Workload {
            name: format!("constant {rate} req/s"),
            arrivals,
            duration_s: n as f64 / rate,
        }
    }

    /// Read a `shortlist.trace.v1` file. Errors name the file, line and field.
    pub fn from_path(path: &Path) -> Result<Self, LoadgenError> {
        let file = std::fs::File::open(path).map_err(|e| LoadgenError::io(path, e))?;
        Self::from_reader(path, std::io::BufReader::new(file))
    }

    /// Read a trace from `reader`; `path` names it in errors.
    pub fn from_reader(path: &Path, reader: impl BufRead) -> Result<Self, LoadgenError> {
        let source = path.display().to_string();
        let reader = TraceReader::new(reader, source.as_str())?;
        let header = reader.header().clone();
        let mut arrivals = Vec::new();
        for request in reader {
            let request = request?;
            arrivals.push(Arrival::from_trace(&request).map_err(|(field, why)| {
                LoadgenError::trace(path, arrivals.len() as u64 + 2, field, why)
            })?);
        }
        Workload::new(header.name(), arrivals, header.duration_s())
    }

    /// A workload from a trace already in memory (a synthesized one, say).
    pub fn from_trace(
        header: &TraceHeader,
        requests: &[TraceRequest],
    ) -> Result<Self, LoadgenError> {
        let arrivals = requests
            .iter()
            .enumerate()
            .map(|(index, r)| {
                Arrival::from_trace(r).map_err(|(field, why)| {
                    LoadgenError::option(
                        "workload",
                        format!("request {index}: field `{field}`: {why}"),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Workload::new(header.name(), arrivals, header.duration_s())
    }

    /// The workload's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The arrivals, sorted by time.
    pub fn arrivals(&self) -> &[Arrival] {
        &self.arrivals
    }
    /// The arrival window in seconds.
    pub fn duration_s(&self) -> f64 {
        self.duration_s
    }
    /// Mean arrival rate over the window, requests per second.
    pub fn mean_rate(&self) -> f64 {
        self.arrivals.len() as f64 / self.duration_s
    }
    /// The highest number of arrivals in any one-second window starting at an arrival.
    pub fn peak_rate_1s(&self) -> f64 {
        let mut peak = 0;
        let mut start = 0;
        for end in 0..self.arrivals.len() {
            while self.arrivals[end].t - self.arrivals[start].t >= 1.0 {
                start += 1;
            }
            peak = peak.max(end - start + 1);
        }
        peak as f64
    }

    /// Part `index` of `of` of the arrival schedule: arrival `i` goes to part `i mod of`, at its
    /// own time, and every part keeps the whole window, so the parts sent together from one
    /// start instant are the whole schedule (each part a thinned copy of its shape).
    pub fn part(&self, index: u32, of: u32) -> Result<Self, LoadgenError> {
        if of == 0 || index >= of {
            return Err(LoadgenError::option(
                "part",
                format!("part {index} of {of}: parts count from 0 and there is at least one"),
            ));
        }
        Ok(Workload {
            name: self.name.clone(),
            arrivals: self
                .arrivals
                .iter()
                .enumerate()
                .filter(|(i, _)| *i as u64 % u64::from(of) == u64::from(index))
                .map(|(_, a)| a.clone())
                .collect(),
            duration_s: self.duration_s,
        })
    }

    /// The same requests whose synthetic prompts (those the trace gives no text for) carry
    /// `salt` before their own text, so that each load step of a sweep sends prompts no earlier
    /// step sent: a server's prompt cache cannot serve a step from the step before (prefix
    /// groups stay shared within the step). A trace's own prompts are sent as they are.
    pub fn salted(&self, salt: &str) -> Self {
        let salt: std::sync::Arc<str> = salt.into();
        Workload {
            name: self.name.clone(),
            arrivals: self
                .arrivals
                .iter()
                .map(|a| {
                    let mut request = a.request.clone();
                    request.salt = Some(std::sync::Arc::clone(&salt));
                    Arrival { t: a.t, request }
                })
                .collect(),
            duration_s: self.duration_s,
        }
    }

    /// The same requests with arrival times stretched or compressed so that the mean rate is
    /// `rate`: the shape (bursts, gaps) is kept, only the clock changes.
    pub fn at_rate(&self, rate: f64) -> Self {
        let factor = self.mean_rate() / rate;
        Workload {
            name: format!("{} at {rate} req/s", self.name),
            arrivals: self
                .arrivals
                .iter()
                .map(|a| Arrival {
                    t: a.t * factor,
                    request: a.request.clone(),
                })
                .collect(),
            duration_s: self.duration_s * factor,
        }
    }
}

impl Arrival {
    /// The load generator's view of a trace request. Token counts beyond `u32` are refused (no
    /// model has such a context).
    fn from_trace(request: &TraceRequest) -> Result<Self, (&'static str, String)> {
        let count = |field: &'static str, n: u64| {
            u32::try_from(n).map_err(|_| {
                (
                    field,
                    format!("{n} tokens is more than one request can hold"),
                )
            })
        };
        let fields = request.fields();
        let mut spec = RequestSpec::new(
            request.id(),
            count("input_tokens", request.input_tokens())?,
            count("output_tokens", request.output_tokens())?,
        );
        if let Some(prefix) = request.prefix() {
            spec = spec.with_prefix(Prefix::new(
                prefix.group.clone(),
                count("prefix.tokens", prefix.tokens)?,
            ));
        }
        if let Some(tenant) = &fields.tenant {
            spec = spec.with_tenant(tenant.clone());
        }
        if let Some(prompt) = &fields.prompt {
            spec = spec.with_prompt(prompt.clone());
        }
        if let Some(messages) = &fields.messages {
            spec = spec.with_messages(messages.clone());
        }
        Ok(Arrival {
            t: request.t(),
            request: spec,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Workload, LoadgenError> {
        Workload::from_reader(Path::new("t.trace.jsonl"), text.as_bytes())
    }

    #[test]
    fn reads_a_trace_and_keeps_prefix_identity() {
        let w = read(concat!(
            r#"{"format":"shortlist.trace.v1","name":"x","duration_s":1.0}"#,
            "\n",
            r#"{"id":"a","t":0.0,"input_tokens":100,"output_tokens":5,"prefix":{"group":"g","tokens":80}}"#,
            "\n",
            r#"{"id":"b","t":0.5,"input_tokens":90,"output_tokens":2,"prefix":{"group":"g","tokens":80}}"#,
            "\n"
        ))
        .unwrap();
        assert_eq!(w.arrivals().len(), 2);
        assert_eq!(w.duration_s(), 1.0);
        assert_eq!(w.arrivals()[1].request.prefix().unwrap().group(), "g");
        assert_eq!(w.arrivals()[1].request.prefix().unwrap().tokens(), 80);
        // A header whose duration ends on the last arrival (an imported trace's span) gets the
        // last arrival plus one mean gap: every request inside the window [0, d).
        let w = read(concat!(
            r#"{"format":"shortlist.trace.v1","name":"x","duration_s":0.5}"#,
            "\n",
            r#"{"id":"a","t":0.0,"input_tokens":100,"output_tokens":5}"#,
            "\n",
            r#"{"id":"b","t":0.5,"input_tokens":90,"output_tokens":2}"#,
            "\n"
        ))
        .unwrap();
        assert_eq!(w.duration_s(), 1.0);
    }

    #[test]
    fn bad_lines_name_line_and_field() {
        let err = read("{\"format\":\"shortlist.trace.v1\"}\n{\"id\":\"a\",\"t\":1}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains(":2: field `input_tokens`"), "{err}");
        let err = read(concat!(
            "{\"format\":\"shortlist.trace.v1\"}\n",
            "{\"id\":\"a\",\"t\":1,\"input_tokens\":1,\"output_tokens\":1}\n",
            "{\"id\":\"b\",\"t\":0.5,\"input_tokens\":1,\"output_tokens\":1}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(":3: field `t`") && err.contains("sorted"),
            "{err}"
        );
        let err = read("{\"format\":\"shortlist.trace.v2\"}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("format"), "{err}");
        assert!(read("").is_err());
    }

    #[test]
    fn rescaling_keeps_shape_and_hits_the_rate() {
        let w = Workload::constant_rate(100, 8.0, 10, 2);
        assert!((w.duration_s() - 12.5).abs() < 1e-9);
        let fast = w.at_rate(16.0);
        assert!((fast.mean_rate() - 16.0).abs() < 1e-9);
        assert!((fast.arrivals()[10].t - w.arrivals()[10].t / 2.0).abs() < 1e-12);
        assert_eq!(w.peak_rate_1s(), 8.0);
    }
}
