//! The eval-set file format on the wire (`shortlist.evalset.v1` YAML), exactly as users write it.
//!
//! These types only describe shape; [`crate::set::EvalSet`] parses them into domain types and
//! rejects what is wrong. Fields left at their defaults are omitted when a set is written back, and
//! serialization writes every default explicitly into the canonical form, so both spellings hash alike.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The format tag this crate reads and writes.
pub const EVALSET_FORMAT: &str = "shortlist.evalset.v1";

// serde's `skip_serializing_if` passes a reference.
#[allow(clippy::trivially_copy_pass_by_ref)] // The signature is serde's, not ours.
pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

/// A whole eval-set file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireSet {
    /// `shortlist.evalset.v1`.
    pub format: String,
    /// A short name, e.g. `support-assistant`.
    pub name: String,
    /// Prose for people; not part of the canonical form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The system prompt of every case that does not set its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Tool definitions that cases refer to by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<WireTool>,
    /// The cases, in order.
    pub cases: Vec<WireCase>,
}

/// A tool definition in OpenAI's shape: `{type: function, function: {name, description, parameters}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireTool {
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The function.
    pub function: WireFunction,
}

/// The function inside a [`WireTool`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireFunction {
    /// The function's name.
    pub name: String,
    /// What it does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A JSON Schema object describing the arguments.
    #[serde(default = "empty_object_schema")]
    pub parameters: Value,
}

fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// A case's tool: a name from the set's `tools`, or a full definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum WireToolRef {
    /// Refers to a tool of the set by its function name.
    Name(String),
    /// A definition used by this case only.
    Inline(WireTool),
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text.
    pub content: String,
}

/// A case's input: one user prompt, or a chat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum WireInput {
    /// A single user message.
    Prompt(String),
    /// A conversation; the last message is normally the user's.
    Messages(Vec<WireMessage>),
}

/// One case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireCase {
    /// Unique within the set.
    pub id: String,
    /// `ordinary`, `high-value`, `adversarial`, `long-context`, `language:<code>`, `tool-call`,
    /// `refusal`, or a custom lowercase name.
    pub category: String,
    /// The prompt or the messages.
    pub input: WireInput,
    /// Overrides the set's system prompt for this case; an empty string means "no system prompt".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The tools offered to the model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<WireToolRef>,
    /// Every check must pass for the case to pass.
    pub checks: Vec<WireCheck>,
    /// The case's weight in weighted scores (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// Free-form labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// Text or a list of texts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// One string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl OneOrMany {
    /// The strings, in order.
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s.clone()],
            Self::Many(v) => v.clone(),
        }
    }
}

/// One expected tool call: the function's name and, per argument, the list of acceptable values
/// (BFCL's answer key: `""` in the list means the argument may be left out). A value that is not a
/// list is one acceptable value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireExpectedCall {
    /// The function that must be called.
    pub name: String,
    /// Argument name → acceptable values.
    #[serde(default)]
    pub arguments: serde_json::Map<String, Value>,
    /// Free-text arguments whose value is not compared (an extension to BFCL for product tools
    /// such as a ticket description): their type is still checked, and they may be left out
    /// unless the schema requires them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub free: Vec<String>,
}

/// A check, tagged by `type`. See `evalsets/README.md` for the semantics of each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum WireCheck {
    /// The trimmed output equals `value`.
    Equals {
        /// Names the check in results (default: its type and position).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// The expected text.
        value: String,
        /// Compare case-insensitively.
        #[serde(default, skip_serializing_if = "is_false")]
        ignore_case: bool,
        /// Pass when the condition does not hold.
        #[serde(default, skip_serializing_if = "is_false")]
        negate: bool,
    },
    /// The output contains `value` (one string or a list, with `mode: all|any`).
    Contains {
        /// Names the check in results.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// The needle(s).
        value: OneOrMany,
        /// `all` (default) or `any`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<String>,
        /// Compare case-insensitively.
        #[serde(default, skip_serializing_if = "is_false")]
        ignore_case: bool,
        /// Pass when the condition does not hold.
        #[serde(default, skip_serializing_if = "is_false")]
        negate: bool,
    },
    /// The trimmed output starts with `value`.
    StartsWith {
        /// Names the check in results.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// The prefix.
        value: String,
        /// Compare case-insensitively.
        #[serde(default, skip_serializing_if = "is_false")]
        ignore_case: bool,
        /// Pass when the condition does not hold.
        #[serde(default, skip_serializing_if = "is_false")]
        negate: bool,
    },
    /// The regular expression matches somewhere in the output.
    Regex {
        /// Names the check in results.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// Rust `regex` syntax.
        pattern: String,
        /// Match case-insensitively.
        #[serde(default, skip_serializing_if = "is_false")]
        ignore_case: bool,
        /// Pass when the pattern does not match.
        #[serde(default, skip_serializing_if = "is_false")]
        negate: bool,
    },
    /// The output is JSON (whole, or in a fenced block), optionally conforming to `schema`.
    Json {
        /// Names the check in results.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// A JSON Schema the value must conform to.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schema: Option<Value>,
        /// `auto` (default: whole output, else the first fenced block) or `strict` (whole output only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<String>,
    },
    /// The model calls the expected tool(s), judged with BFCL's AST rules.
    ToolCall {
        /// Names the check in results.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// The calls expected.
        calls: Vec<WireExpectedCall>,
        /// `any` (default: order-insensitive) or `exact`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        order: Option<String>,
    },
    /// The model makes no tool call (a malformed call is a call).
    NoToolCall {
        /// Names the check in results.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// The model refuses (`expect: refuse`) or answers (`expect: answer`).
    Refusal {
        /// Names the check in results.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// `refuse` or `answer`.
        expect: String,
        /// Extra refusal phrases (case-insensitive substrings) on top of the built-in ones.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        patterns: Vec<String>,
    },
    /// The output is written in the given language (ISO 639-1 or 639-3 code).
    Language {
        /// Names the check in results.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// e.g. `de`.
        code: String,
    },
    /// A number in the output is within tolerance of `value`.
    Number {
        /// Names the check in results.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// The expected number.
        value: f64,
        /// Absolute tolerance (default 0).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tolerance: Option<f64>,
        /// Which number counts: `any` (default), `first` or `last`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pick: Option<String>,
        /// `point` (default: `1,299.50`) or `comma` (`1.299,50`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decimal: Option<String>,
    },
    /// Length limits in characters and/or words.
    Length {
        /// Names the check in results.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// At least this many characters.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min_chars: Option<u64>,
        /// At most this many characters.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_chars: Option<u64>,
        /// At least this many words.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min_words: Option<u64>,
        /// At most this many words.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_words: Option<u64>,
    },
    /// Another model grades the output against a written rubric.
    Judge {
        /// Names the check in results; judge verdicts are supplied under this name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// The candidate that acts as judge.
        judge: String,
        /// The rubric, verbatim.
        rubric: String,
        /// If given, must equal the SHA-256 (hex) of `rubric`: pins the rubric against edits.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rubric_sha256: Option<String>,
    },
}

impl WireCheck {
    /// The explicit name, if the author gave one.
    pub fn explicit_name(&self) -> Option<&str> {
        match self {
            Self::Equals { name, .. }
            | Self::Contains { name, .. }
            | Self::StartsWith { name, .. }
            | Self::Regex { name, .. }
            | Self::Json { name, .. }
            | Self::ToolCall { name, .. }
            | Self::NoToolCall { name }
            | Self::Refusal { name, .. }
            | Self::Language { name, .. }
            | Self::Number { name, .. }
            | Self::Length { name, .. }
            | Self::Judge { name, .. } => name.as_deref(),
        }
    }

    /// The `type` tag.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Equals { .. } => "equals",
            Self::Contains { .. } => "contains",
            Self::StartsWith { .. } => "starts-with",
            Self::Regex { .. } => "regex",
            Self::Json { .. } => "json",
            Self::ToolCall { .. } => "tool-call",
            Self::NoToolCall { .. } => "no-tool-call",
            Self::Refusal { .. } => "refusal",
            Self::Language { .. } => "language",
            Self::Number { .. } => "number",
            Self::Length { .. } => "length",
            Self::Judge { .. } => "judge",
        }
    }
}
