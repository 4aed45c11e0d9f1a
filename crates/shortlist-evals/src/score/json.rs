//! JSON validity and JSON Schema conformance.
//!
//! Where the JSON is taken from (`source`):
//! - `strict`: the whole output, trimmed, must be one JSON value.
//! - `auto` (default): the whole trimmed output if it parses; otherwise the body of the first fenced
//!   code block (```` ``` ```` or ```` ```json ````) in the output. Nothing else is searched: prose
//!   with a JSON object somewhere inside it does not pass, because an application that parses the
//!   response would not find it either.
//!
//! Malformed JSON never passes, whatever the schema says.

use std::sync::Arc;

use serde_json::Value;

use super::{Scorer, Verdict};
use crate::response::Response;

/// Where the JSON value is taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonSource {
    /// The whole output, else the first fenced block.
    Auto,
    /// The whole output only.
    Strict,
}

/// A JSON check, with its schema compiled once.
#[derive(Debug, Clone)]
pub struct JsonCheck {
    source: JsonSource,
    validator: Option<Arc<jsonschema::Validator>>,
}

impl JsonCheck {
    /// Compiles the schema (if any); an invalid schema is an error, not a check that always fails.
    pub fn new(schema: Option<&Value>, source: JsonSource) -> Result<Self, String> {
        let validator = match schema {
            Some(s) => Some(Arc::new(
                jsonschema::validator_for(s).map_err(|e| format!("invalid JSON Schema: {e}"))?,
            )),
            None => None,
        };
        Ok(Self { source, validator })
    }
}

/// Extracts the JSON value from `text` by the rule in the module docs.
pub fn extract_json(text: &str, source: JsonSource) -> Result<Value, String> {
    let whole = serde_json::from_str::<Value>(text.trim());
    match (whole, source) {
        (Ok(v), _) => Ok(v),
        (Err(e), JsonSource::Strict) => Err(format!("output is not valid JSON: {e}")),
        (Err(e), JsonSource::Auto) => match first_fenced_block(text) {
            Some(body) => serde_json::from_str::<Value>(body.trim())
                .map_err(|e| format!("fenced block is not valid JSON: {e}")),
            None => Err(format!(
                "output is not valid JSON and has no fenced code block: {e}"
            )),
        },
    }
}

/// The body of the first fenced block whose info string is empty or `json`.
fn first_fenced_block(text: &str) -> Option<&str> {
    let mut rest = text;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        let (info, body_start) = match after.find('\n') {
            Some(nl) => (after[..nl].trim(), nl + 1),
            None => return None,
        };
        let body = &after[body_start..];
        let end = body.find("```")?;
        if info.is_empty() || info.eq_ignore_ascii_case("json") {
            return Some(&body[..end]);
        }
        rest = &body[end + 3..];
    }
    None
}

impl Scorer for JsonCheck {
    fn score(&self, response: &Response) -> Verdict {
        let value = match extract_json(response.text(), self.source) {
            Ok(v) => v,
            Err(e) => return Verdict::fail_code("invalid_json", e),
        };
        if let Some(v) = &self.validator {
            let errors: Vec<String> = v
                .iter_errors(&value)
                .take(3)
                .map(|e| format!("at {:?}: {e}", e.instance_path().to_string()))
                .collect();
            if !errors.is_empty() {
                return Verdict::fail_code("schema_violation", errors.join("; "));
            }
        }
        Verdict::pass()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "required": ["plan", "seats"],
               "properties": {"plan": {"enum": ["starter", "team", "business"]},
                              "seats": {"type": "integer", "minimum": 1}},
               "additionalProperties": false})
    }

    fn ok(check: &JsonCheck, text: &str) -> bool {
        check.score(&Response::text_only(text)).passed()
    }

    #[test]
    fn validity_without_schema() {
        let c = JsonCheck::new(None, JsonSource::Auto).unwrap();
        assert!(ok(&c, "{\"a\": 1}\n"));
        assert!(ok(&c, "[1,2]"));
        assert!(!ok(&c, "{\"a\": 1,}"));
        assert!(!ok(&c, "{'a': 1}"));
        assert!(!ok(&c, "Sure! {\"a\": 1}"));
        assert!(!ok(&c, ""));
    }

    #[test]
    fn fenced_block_rule() {
        let c = JsonCheck::new(None, JsonSource::Auto).unwrap();
        assert!(ok(
            &c,
            "Here you go:\n```json\n{\"a\": 1}\n```\nAnything else?"
        ));
        assert!(ok(&c, "```\n{\"a\": 1}\n```"));
        // A non-JSON block first is skipped; the first json/untagged block counts.
        assert!(ok(&c, "```sh\nls\n```\n```json\n{\"a\": 1}\n```"));
        assert!(!ok(&c, "```json\n{\"a\": 1,}\n```"));
        assert!(!ok(&c, "```json\n{\"a\": 1}")); // unterminated
        let strict = JsonCheck::new(None, JsonSource::Strict).unwrap();
        assert!(!ok(&strict, "```json\n{\"a\": 1}\n```"));
    }

    #[test]
    fn schema_conformance() {
        let c = JsonCheck::new(Some(&schema()), JsonSource::Auto).unwrap();
        assert!(ok(&c, r#"{"plan": "team", "seats": 5}"#));
        assert!(!ok(&c, r#"{"plan": "team", "seats": 5.5}"#));
        assert!(!ok(&c, r#"{"plan": "gold", "seats": 5}"#));
        assert!(!ok(&c, r#"{"plan": "team"}"#));
        assert!(!ok(&c, r#"{"plan": "team", "seats": 5, "x": 1}"#));
        let v = c.score(&Response::text_only(r#"{"plan": "team", "seats": 0}"#));
        assert_eq!(v.code.as_deref(), Some("schema_violation"));
        // Malformed JSON never passes, even against the permissive empty schema.
        let any = JsonCheck::new(Some(&json!({})), JsonSource::Auto).unwrap();
        assert!(!ok(&any, "{plan: team}"));
    }

    proptest::proptest! {
        #[test]
        fn any_serialised_value_passes_whole_or_fenced(keys in proptest::collection::vec("[a-z]{1,8}", 0..5), n in -1000i64..1000) {
            let mut m = serde_json::Map::new();
            for k in keys {
                m.insert(k, json!(n));
            }
            let text = Value::Object(m).to_string();
            let c = JsonCheck::new(None, JsonSource::Auto).unwrap();
            proptest::prop_assert!(ok(&c, &text));
            let fenced = format!("Here:\n```json\n{text}\n```\n");
            proptest::prop_assert!(ok(&c, &fenced));
            // Cutting the last character off always breaks it.
            proptest::prop_assert!(!ok(&c, &text[..text.len() - 1]));
        }
    }

    #[test]
    fn invalid_schema_is_rejected() {
        assert!(JsonCheck::new(Some(&json!({"type": 12})), JsonSource::Auto).is_err());
    }
}
