//! From an eval case to a chat request, and prompted tool calling for models without a native
//! tool-call API: tools described in the system prompt, calls parsed from `<tool_call>` blocks.

use serde_json::Value;
use shortlist_evals::{Case, ToolCall};

/// A chat request built from a case.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub system: Option<String>,
    /// `(role, content)` in order.
    pub messages: Vec<(String, String)>,
    /// Tools in OpenAI's shape (`{"type": "function", "function": {...}}`).
    pub tools: Vec<Value>,
}

impl ChatRequest {
    /// The request for one case.
    pub fn from_case(case: &Case) -> ChatRequest {
        ChatRequest {
            system: case.system().map(str::to_owned),
            messages: case
                .messages()
                .iter()
                .map(|m| (m.role.as_str().to_owned(), m.content.clone()))
                .collect(),
            tools: case.tools().iter().map(|t| t.to_openai()).collect(),
        }
    }
}

/// The instruction appended to the system prompt when tools are offered to a model that has no
/// tool-call API: the same words for every candidate, so that the comparison stays fair.
pub const TOOL_INSTRUCTIONS: &str = "You can call these tools. To call one, answer with exactly one line of the form \
<tool_call>{\"name\": \"TOOL_NAME\", \"arguments\": {...}}</tool_call> and nothing else. If no tool fits, answer in plain text.";

/// Messages for a model without a tool API: tools and instructions go into the system prompt.
pub fn prompt_messages(request: &ChatRequest) -> Vec<(String, String)> {
    let mut system = request.system.clone().unwrap_or_default();
    if !request.tools.is_empty() {
        let tools: Vec<String> = request
            .tools
            .iter()
            .map(|t| t["function"].to_string())
            .collect();
        if !system.is_empty() {
            system.push_str("\n\n");
        }
        system.push_str(TOOL_INSTRUCTIONS);
        system.push_str("\nTools:\n");
        system.push_str(&tools.join("\n"));
    }
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !system.is_empty() {
        messages.push(("system".to_owned(), system));
    }
    messages.extend(request.messages.iter().cloned());
    messages
}

/// Split generated text into prose and tool calls. A `<tool_call>` block whose JSON does not parse
/// is kept as a malformed call (a malformed call is not "no call"). A whole answer that is one JSON
/// object with `name` and `arguments` is also a call.
pub fn parse_prompted_tool_calls(text: &str) -> (String, Vec<ToolCall>) {
    let mut calls = Vec::new();
    let mut prose = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("<tool_call>") {
        prose.push_str(&rest[..start]);
        let after = &rest[start + "<tool_call>".len()..];
        let (body, next) = match after.find("</tool_call>") {
            Some(end) => (&after[..end], &after[end + "</tool_call>".len()..]),
            None => (after, ""),
        };
        calls.push(call_from_json(body.trim()));
        rest = next;
    }
    prose.push_str(rest);
    if calls.is_empty() {
        let trimmed = text
            .trim()
            .trim_start_matches("```json")
            .trim_start_matches("```")
            .trim_end_matches("```")
            .trim();
        if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(trimmed)
            && map.contains_key("name")
            && map.contains_key("arguments")
        {
            return (String::new(), vec![call_from_json(trimmed)]);
        }
    }
    (prose.trim().to_owned(), calls)
}

fn call_from_json(body: &str) -> ToolCall {
    match serde_json::from_str::<Value>(body) {
        Ok(Value::Object(map)) => {
            let name = map
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            match map.get("arguments") {
                Some(Value::Object(args)) => ToolCall::new(name, args.clone()),
                Some(Value::String(s)) => ToolCall::from_openai(name, s),
                Some(other) => ToolCall::from_openai(name, &other.to_string()),
                None => ToolCall::from_openai(name, "missing"),
            }
        }
        _ => ToolCall::from_openai("", body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_calls_are_parsed_and_malformed_ones_kept() {
        let (prose, calls) = parse_prompted_tool_calls(
            r#"<tool_call>{"name": "get_order", "arguments": {"order_id": "A-1"}}</tool_call>"#,
        );
        assert_eq!(prose, "");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name(), "get_order");
        assert_eq!(calls[0].arguments().unwrap()["order_id"], "A-1");

        let (_, calls) = parse_prompted_tool_calls(
            r#"Sure! <tool_call>{"name": "get_order", "arguments": {"order_id": </tool_call>"#,
        );
        assert_eq!(calls.len(), 1);
        assert!(calls[0].arguments().is_err());

        let (_, calls) = parse_prompted_tool_calls(
            "```json\n{\"name\": \"refund\", \"arguments\": {\"amount\": 5}}\n```",
        );
        assert_eq!(calls[0].name(), "refund");

        let (prose, calls) = parse_prompted_tool_calls("I cannot help with that.");
        assert!(calls.is_empty());
        assert_eq!(prose, "I cannot help with that.");
    }
}
