//! What a model produced for one case: text, tool calls, finish reason, and any judge verdicts —
//! and the outputs file (`*.outputs.jsonl`, one JSON line per case) that carries them.
//!
//! Tool-call arguments arrive as a JSON string (OpenAI's shape). They are parsed here, once; a call
//! whose arguments do not parse stays a call, marked malformed, so no scorer can mistake it for
//! "no call" (BFCL #1362).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::EvalError;

/// Why generation stopped, normalised from the provider's string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// A natural stop or a stop sequence.
    Stop,
    /// The token limit was reached.
    Length,
    /// The model stopped to call tools.
    ToolCalls,
    /// The provider's content filter stopped it (counts as a refusal).
    ContentFilter,
    /// Anything else, verbatim.
    Other(String),
}

impl FinishReason {
    /// Normalises a provider string (`stop`, `eos`, `length`, `max_tokens`, `tool_calls`,
    /// `function_call`, `content_filter`, `refusal`, ...).
    pub fn parse(s: &str) -> Self {
        match s.to_ascii_lowercase().as_str() {
            "stop" | "eos" | "end_turn" | "stop_sequence" => Self::Stop,
            "length" | "max_tokens" | "model_length" => Self::Length,
            "tool_calls" | "function_call" | "tool_use" => Self::ToolCalls,
            "content_filter" | "refusal" | "safety" => Self::ContentFilter,
            _ => Self::Other(s.to_owned()),
        }
    }

    /// The canonical spelling.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::ToolCalls => "tool_calls",
            Self::ContentFilter => "content_filter",
            Self::Other(s) => s,
        }
    }
}

/// One tool call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    name: String,
    arguments: Result<Map<String, Value>, String>,
}

impl ToolCall {
    /// A well-formed call.
    pub fn new(name: impl Into<String>, arguments: Map<String, Value>) -> Self {
        Self {
            name: name.into(),
            arguments: Ok(arguments),
        }
    }

    /// A call from OpenAI's wire shape, where `arguments` is a JSON string. Arguments that do not
    /// parse as a JSON object make a malformed call (kept, with the parse error).
    pub fn from_openai(name: impl Into<String>, arguments: &str) -> Self {
        let arguments = match serde_json::from_str::<Value>(arguments) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(other) => Err(format!("arguments are JSON but not an object: {other}")),
            Err(e) => Err(format!("arguments are not valid JSON: {e}")),
        };
        Self {
            name: name.into(),
            arguments,
        }
    }

    /// The function name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The parsed arguments, or why they could not be parsed.
    pub fn arguments(&self) -> Result<&Map<String, Value>, &str> {
        self.arguments.as_ref().map_err(String::as_str)
    }
}

/// A model's response to one case.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Response {
    text: String,
    tool_calls: Vec<ToolCall>,
    finish_reason: Option<FinishReason>,
    judgements: BTreeMap<String, String>,
}

impl Response {
    /// A response.
    pub fn new(
        text: impl Into<String>,
        tool_calls: Vec<ToolCall>,
        finish_reason: Option<FinishReason>,
    ) -> Self {
        Self {
            text: text.into(),
            tool_calls,
            finish_reason,
            judgements: BTreeMap::new(),
        }
    }

    /// Text only, finished normally.
    pub fn text_only(text: impl Into<String>) -> Self {
        Self::new(text, Vec::new(), Some(FinishReason::Stop))
    }

    /// Adds a judge's raw output for the judge check named `check`.
    #[must_use]
    pub fn with_judgement(
        mut self,
        check: impl Into<String>,
        judge_output: impl Into<String>,
    ) -> Self {
        self.judgements.insert(check.into(), judge_output.into());
        self
    }

    /// Moves `<tool_call>` blocks written in the text into tool calls (see
    /// [`tool_calls_from_text`]), for outputs of models without native tool calling. A response
    /// that already carries tool calls is returned unchanged.
    #[must_use]
    pub fn with_text_tool_calls(mut self) -> Self {
        if self.tool_calls.is_empty() {
            let (prose, calls) = tool_calls_from_text(&self.text);
            if !calls.is_empty() {
                self.text = prose;
                self.tool_calls = calls;
            }
        }
        self
    }

    /// The text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The tool calls, in the order made.
    pub fn tool_calls(&self) -> &[ToolCall] {
        &self.tool_calls
    }

    /// Why generation stopped, if known.
    pub fn finish_reason(&self) -> Option<&FinishReason> {
        self.finish_reason.as_ref()
    }

    /// The judge's raw output for a judge check, if supplied.
    pub fn judgement(&self, check: &str) -> Option<&str> {
        self.judgements.get(check).map(String::as_str)
    }
}

/// Tool calls written into the text, for models whose chat template has no native tool calling.
///
/// Recognises the Hermes convention used by several open chat templates: each
/// `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` block is one call. A block whose body
/// is not such an object (or is unterminated) yields a malformed call named `"?"` rather than
/// nothing, so that a garbled attempt is never scored as "no call". Returns the text with the blocks
/// removed, and the calls in order.
pub fn tool_calls_from_text(text: &str) -> (String, Vec<ToolCall>) {
    const OPEN: &str = "<tool_call>";
    const CLOSE: &str = "</tool_call>";
    let mut rest = text;
    let mut prose = String::new();
    let mut calls = Vec::new();
    while let Some(start) = rest.find(OPEN) {
        prose.push_str(&rest[..start]);
        let after = &rest[start + OPEN.len()..];
        let (body, next) = match after.find(CLOSE) {
            Some(end) => (&after[..end], &after[end + CLOSE.len()..]),
            None => (after, ""),
        };
        calls.push(parse_hermes_call(
            body,
            next.is_empty() && !after.contains(CLOSE),
        ));
        rest = next;
    }
    prose.push_str(rest);
    (prose.trim().to_owned(), calls)
}

fn parse_hermes_call(body: &str, unterminated: bool) -> ToolCall {
    let malformed = |name: &str, why: String| ToolCall {
        name: name.to_owned(),
        arguments: Err(why),
    };
    let v: Value = match serde_json::from_str(body.trim()) {
        Ok(v) => v,
        Err(e) => {
            let why = if unterminated {
                "unterminated <tool_call> block".to_owned()
            } else {
                format!("tool call is not valid JSON: {e}")
            };
            return malformed("?", why);
        }
    };
    let Some(name) = v.get("name").and_then(Value::as_str) else {
        return malformed("?", "tool call has no string `name`".into());
    };
    match v.get("arguments") {
        Some(Value::Object(m)) => ToolCall::new(name, m.clone()),
        Some(Value::String(s)) => ToolCall::from_openai(name, s),
        None => ToolCall::new(name, Map::new()),
        Some(other) => malformed(name, format!("arguments are not an object: {other}")),
    }
}

/// One line of an outputs file, on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireOutput {
    /// The case id.
    pub id: String,
    /// The text the model produced (may be empty or null when it only called tools).
    #[serde(default)]
    pub output: Option<String>,
    /// Tool calls in OpenAI's shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<WireToolCall>>,
    /// The provider's finish reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Judge outputs, by judge check name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judgements: Option<BTreeMap<String, String>>,
}

/// A tool call in OpenAI's shape: `{id, type: "function", function: {name, arguments: "<json>"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireToolCall {
    /// The provider's call id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `function`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name and arguments.
    pub function: WireFunctionCall,
}

/// The function part of a [`WireToolCall`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireFunctionCall {
    /// The function name.
    pub name: String,
    /// JSON text, as OpenAI sends it; an object is accepted too.
    pub arguments: Value,
}

impl From<&WireOutput> for Response {
    fn from(w: &WireOutput) -> Self {
        let calls = w
            .tool_calls
            .iter()
            .flatten()
            .map(|c| match &c.function.arguments {
                Value::String(s) => ToolCall::from_openai(c.function.name.clone(), s),
                Value::Object(m) => ToolCall::new(c.function.name.clone(), m.clone()),
                other => ToolCall {
                    name: c.function.name.clone(),
                    arguments: Err(format!(
                        "arguments are neither a JSON string nor an object: {other}"
                    )),
                },
            })
            .collect();
        let mut r = Response::new(
            w.output.clone().unwrap_or_default(),
            calls,
            w.finish_reason.as_deref().map(FinishReason::parse),
        );
        if let Some(j) = &w.judgements {
            r.judgements.clone_from(j);
        }
        r
    }
}

/// Parses an outputs file (JSON Lines). Blank lines are skipped; a repeated id is an error.
/// Returns `(id, line, response)` in file order.
pub fn parse_outputs(file: &str, text: &str) -> Result<Vec<(String, usize, Response)>, EvalError> {
    let mut seen = BTreeMap::new();
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let mut de = serde_json::Deserializer::from_str(line);
        let wire: WireOutput = serde_path_to_error::deserialize(&mut de)
            .map_err(|e| EvalError::from_json_line(file, lineno, &e))?;
        if let Some(first) = seen.insert(wire.id.clone(), lineno) {
            return Err(EvalError::invalid(
                file,
                lineno,
                "id",
                format!("case id {:?} already appeared on line {first}", wire.id),
            ));
        }
        out.push((wire.id.clone(), lineno, Response::from(&wire)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_arguments_make_a_malformed_call_not_no_call() {
        let text = r#"{"id":"a","output":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\": 1"}}]}"#;
        let parsed = parse_outputs("o.jsonl", text).unwrap();
        let r = &parsed[0].2;
        assert_eq!(r.tool_calls().len(), 1);
        assert!(r.tool_calls()[0].arguments().is_err());
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let text = "{\"id\":\"a\",\"output\":\"x\"}\n\n{\"id\":\"b\",\"output\":3}\n";
        let e = parse_outputs("o.jsonl", text).unwrap_err().to_string();
        assert!(e.starts_with("o.jsonl:3: field `output`"), "{e}");
        let dup = "{\"id\":\"a\",\"output\":\"x\"}\n{\"id\":\"a\",\"output\":\"y\"}\n";
        let e = parse_outputs("o.jsonl", dup).unwrap_err().to_string();
        assert!(e.contains("o.jsonl:2") && e.contains("line 1"), "{e}");
    }

    #[test]
    fn hermes_tool_calls_in_text() {
        let (prose, calls) = tool_calls_from_text(
            "Let me check.\n<tool_call>{\"name\": \"check_status\", \"arguments\": {\"service\": \"api\"}}</tool_call>",
        );
        assert_eq!(prose, "Let me check.");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name(), "check_status");
        assert_eq!(calls[0].arguments().unwrap()["service"], "api");
        let (_, bad) =
            tool_calls_from_text("<tool_call>{\"name\": \"x\", \"arguments\": {</tool_call>");
        assert!(bad[0].arguments().is_err());
        let (_, cut) = tool_calls_from_text("<tool_call>{\"name\": \"x\"");
        assert_eq!(cut.len(), 1);
        assert!(cut[0].arguments().is_err());
        let r = Response::text_only("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>")
            .with_text_tool_calls();
        assert_eq!((r.text(), r.tool_calls().len()), ("", 1));
        let (prose, none) = tool_calls_from_text("No tools needed.");
        assert!(none.is_empty());
        assert_eq!(prose, "No tools needed.");
    }

    #[test]
    fn finish_reasons_normalise() {
        assert_eq!(
            FinishReason::parse("content_filter"),
            FinishReason::ContentFilter
        );
        assert_eq!(FinishReason::parse("max_tokens"), FinishReason::Length);
        assert_eq!(FinishReason::parse("weird").as_str(), "weird");
    }
}
