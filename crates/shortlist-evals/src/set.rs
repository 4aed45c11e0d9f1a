//! Eval sets: parsing `shortlist.evalset.v1` YAML into checked domain types, and the content hash.
//!
//! Everything a case needs is checked when the set is loaded — ids unique, categories known,
//! regexes compiled, JSON Schemas compiled, expected tool calls consistent with the case's tool
//! schemas, judge rubrics matching their pins — so that scoring cannot fail on a bad set, and a bad
//! set is reported with its file, line and field.
//!
//! **Canonical form and version.** A set's version is the SHA-256 of its canonical form: the JSON
//! document `{"format", "name", "cases"}` in which every case has its tool references replaced by
//! the full definitions, the effective system prompt written into the case, and every field at its
//! default value left out (`weight: 1`, `mode: all`, `order: any`, `source: auto`, `pick: any`,
//! `decimal: point`, `tolerance: 0`, `false` flags, empty lists). Objects are written with keys in
//! byte order, without whitespace, numbers as `serde_json` prints them. Comments, key order, YAML
//! quoting style, `description` and unused set-level tools therefore do not change the version;
//! anything that can change a score does.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::EvalError;
use crate::response::Response;
use crate::score::json::{JsonCheck, JsonSource};
use crate::score::judge::JudgeCheck;
use crate::score::language::{LanguageCheck, parse_lang};
use crate::score::length::LengthCheck;
use crate::score::number::{Decimal, NumberCheck, Pick};
use crate::score::refusal::{Expect, RefusalCheck};
use crate::score::text::{Mode, TextCheck, TextOp};
use crate::score::tool::{ExpectedCall, FunctionSpec, NoToolCallCheck, ToolCallCheck};
use crate::score::{Scorer, Verdict};
use crate::wire::{EVALSET_FORMAT, WireCase, WireCheck, WireInput, WireSet, WireTool, WireToolRef};

/// The deepest bracket nesting (`[` and `{`, counted wherever they stand) a YAML input may reach.
///
/// The YAML parser's time grows with the square of the flow nesting depth (a million nested `[`
/// would take hours), and the deserializer refuses anything past 128 levels anyway, so a deeper
/// document can never load. Brackets inside quoted text count too: a real eval set stays far below
/// this, and the scan that enforces it is linear and cannot be fooled by quotes.
pub const MAX_YAML_NESTING: usize = 256;

/// Parses YAML text into `T`, refusing first, in linear time, a nesting deeper than
/// [`MAX_YAML_NESTING`].
pub(crate) fn from_yaml_text<T: serde::de::DeserializeOwned>(
    file: &str,
    text: &str,
) -> Result<T, EvalError> {
    let (mut depth, mut line) = (0usize, 1usize);
    for b in text.bytes() {
        match b {
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_YAML_NESTING {
                    return Err(EvalError::invalid(
                        file,
                        line,
                        "",
                        format!(
                            "brackets nest more than {MAX_YAML_NESTING} deep; refused before \
                             parsing (a YAML document this deep cannot be loaded)"
                        ),
                    ));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b'\n' => line += 1,
            _ => {}
        }
    }
    serde_norway::from_str(text).map_err(|e| EvalError::from_yaml(file, &e))
}

/// A case's category: the chapter's kinds of product work, or a custom one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Category {
    /// Everyday requests.
    Ordinary,
    /// Cases whose failure costs the most.
    HighValue,
    /// Attempts to make the model misbehave.
    Adversarial,
    /// Long inputs.
    LongContext,
    /// A required language (ISO code as written, lowercase).
    Language(String),
    /// The model must call (or not call) tools correctly.
    ToolCall,
    /// Refusal behaviour, both directions.
    Refusal,
    /// A product-specific category.
    Custom(String),
}

impl Category {
    /// Parses `ordinary`, `high-value`, `adversarial`, `long-context`, `language:<code>`,
    /// `tool-call`, `refusal`, or a custom name (lowercase letters, digits, `-`, `_`).
    pub fn parse(s: &str) -> Result<Self, String> {
        Ok(match s {
            "ordinary" => Self::Ordinary,
            "high-value" => Self::HighValue,
            "adversarial" => Self::Adversarial,
            "long-context" => Self::LongContext,
            "tool-call" => Self::ToolCall,
            "refusal" => Self::Refusal,
            _ => {
                if let Some(code) = s.strip_prefix("language:") {
                    if parse_lang(code).is_none() {
                        return Err(format!("unknown language code {code:?} in category"));
                    }
                    Self::Language(code.to_owned())
                } else if !s.is_empty()
                    && s.chars().all(|c| {
                        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_'
                    })
                {
                    Self::Custom(s.to_owned())
                } else {
                    return Err(format!(
                        "category {s:?} is neither a known one (ordinary, high-value, adversarial, \
                         long-context, language:<code>, tool-call, refusal) nor a custom name of \
                         lowercase letters, digits, '-' and '_'"
                    ));
                }
            }
        })
    }

    /// The spelling used in files and tables.
    pub fn as_string(&self) -> String {
        match self {
            Self::Ordinary => "ordinary".into(),
            Self::HighValue => "high-value".into(),
            Self::Adversarial => "adversarial".into(),
            Self::LongContext => "long-context".into(),
            Self::Language(c) => format!("language:{c}"),
            Self::ToolCall => "tool-call".into(),
            Self::Refusal => "refusal".into(),
            Self::Custom(c) => c.clone(),
        }
    }
}

/// A chat role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Instructions.
    System,
    /// The user.
    User,
    /// The assistant (earlier turns).
    Assistant,
    /// A tool result.
    Tool,
}

impl Role {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "system" => Self::System,
            "user" => Self::User,
            "assistant" => Self::Assistant,
            "tool" => Self::Tool,
            _ => return None,
        })
    }

    /// The OpenAI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// What they say.
    pub content: String,
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    wire: WireTool,
    spec: FunctionSpec,
}

impl Tool {
    /// The function name.
    pub fn name(&self) -> &str {
        self.spec.name()
    }

    /// The definition in OpenAI's shape, ready to send to a model.
    pub fn to_openai(&self) -> Value {
        serde_json::to_value(&self.wire).unwrap_or(Value::Null)
    }
}

/// A check with its name (unique within the case).
#[derive(Debug, Clone)]
pub struct Check {
    name: String,
    kind: CheckKind,
}

/// The scorer behind a check.
#[derive(Debug, Clone)]
pub enum CheckKind {
    /// equals / contains / starts-with / regex.
    Text(TextCheck),
    /// JSON validity and schema.
    Json(JsonCheck),
    /// Expected tool calls.
    ToolCall(ToolCallCheck),
    /// No tool call.
    NoToolCall(NoToolCallCheck),
    /// Must refuse / must answer.
    Refusal(RefusalCheck),
    /// Response language.
    Language(LanguageCheck),
    /// Numeric answer.
    Number(NumberCheck),
    /// Length limits.
    Length(LengthCheck),
    /// LLM judge.
    Judge(JudgeCheck),
}

impl Check {
    /// The check's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The scorer.
    pub fn kind(&self) -> &CheckKind {
        &self.kind
    }

    /// Scores one response.
    pub fn score(&self, response: &Response) -> Verdict {
        match &self.kind {
            CheckKind::Text(c) => c.score(response),
            CheckKind::Json(c) => c.score(response),
            CheckKind::ToolCall(c) => c.score(response),
            CheckKind::NoToolCall(c) => c.score(response),
            CheckKind::Refusal(c) => c.score(response),
            CheckKind::Language(c) => c.score(response),
            CheckKind::Number(c) => c.score(response),
            CheckKind::Length(c) => c.score(response),
            CheckKind::Judge(c) => c.score(response),
        }
    }
}

/// One case of an eval set.
#[derive(Debug, Clone)]
pub struct Case {
    id: String,
    category: Category,
    system: Option<String>,
    messages: Vec<Message>,
    tools: Vec<Tool>,
    checks: Vec<Check>,
    weight: f64,
    tags: Vec<String>,
    line: usize,
    canonical: WireCase,
}

impl Case {
    /// The id, unique within the set.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// The category.
    pub fn category(&self) -> &Category {
        &self.category
    }
    /// The effective system prompt.
    pub fn system(&self) -> Option<&str> {
        self.system.as_deref()
    }
    /// The conversation (without the system prompt).
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }
    /// The tools offered.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }
    /// The checks; all must pass.
    pub fn checks(&self) -> &[Check] {
        &self.checks
    }
    /// The weight (≥ 0; default 1).
    pub fn weight(&self) -> f64 {
        self.weight
    }
    /// The tags.
    pub fn tags(&self) -> &[String] {
        &self.tags
    }
    /// The line in the source file where the case starts (0 when unknown).
    pub fn line(&self) -> usize {
        self.line
    }
    /// Approximate input size in tokens: characters of system prompt and messages divided by 4.
    pub fn approx_input_tokens(&self) -> usize {
        let chars: usize = self.system.as_deref().map_or(0, |s| s.chars().count())
            + self
                .messages
                .iter()
                .map(|m| m.content.chars().count())
                .sum::<usize>();
        chars / 4
    }
    /// The case as it enters the set's canonical form (references resolved, defaults left out).
    pub(crate) fn canonical(&self) -> &WireCase {
        &self.canonical
    }
    /// The messages to send to a chat model, system prompt first.
    pub fn chat(&self) -> Vec<Message> {
        let mut out = Vec::with_capacity(self.messages.len() + 1);
        if let Some(s) = &self.system {
            out.push(Message {
                role: Role::System,
                content: s.clone(),
            });
        }
        out.extend(self.messages.iter().cloned());
        out
    }
}

/// A loaded, checked eval set.
#[derive(Debug, Clone)]
pub struct EvalSet {
    name: String,
    description: Option<String>,
    cases: Vec<Case>,
    sha256: String,
}

impl EvalSet {
    /// Parses and checks a set from YAML text; `file` is used in error messages only.
    pub fn from_yaml(file: &str, text: &str) -> Result<Self, EvalError> {
        let probe: serde_norway::Value = from_yaml_text(file, text)?;
        match probe.get("format").and_then(serde_norway::Value::as_str) {
            Some(EVALSET_FORMAT) => {}
            Some(other) => {
                return Err(EvalError::UnsupportedFormat {
                    at: crate::error::Location {
                        file: file.into(),
                        line: line_of(text, "format:"),
                        field: "format".into(),
                    },
                    found: other.into(),
                    expected: EVALSET_FORMAT.into(),
                });
            }
            None => {
                return Err(EvalError::invalid(
                    file,
                    1,
                    "format",
                    format!(
                        "missing `format: {EVALSET_FORMAT}` (is this an eval set? other formats need `shortlist eval import`)"
                    ),
                ));
            }
        }
        let wire: WireSet = from_yaml_text(file, text)?;
        Self::from_wire(file, &wire, Some(text))
    }

    /// Checks a set given in its wire form (e.g. built by an importer). `text`, when given, is
    /// the source the wire form came from and lets errors name lines.
    pub fn from_wire(file: &str, wire: &WireSet, text: Option<&str>) -> Result<Self, EvalError> {
        if wire.format != EVALSET_FORMAT {
            return Err(EvalError::UnsupportedFormat {
                at: crate::error::Location {
                    file: file.into(),
                    line: 0,
                    field: "format".into(),
                },
                found: wire.format.clone(),
                expected: EVALSET_FORMAT.into(),
            });
        }
        if wire.name.trim().is_empty() {
            return Err(EvalError::invalid(
                file,
                text.map_or(0, |t| line_of(t, "name:")),
                "name",
                "must not be empty",
            ));
        }
        let mut library = BTreeMap::new();
        for (i, t) in wire.tools.iter().enumerate() {
            let tool = parse_tool(t).map_err(|m| {
                EvalError::invalid(
                    file,
                    text.map_or(0, |x| line_of(x, &t.function.name)),
                    format!("tools[{i}]"),
                    m,
                )
            })?;
            if library.insert(tool.name().to_owned(), tool).is_some() {
                return Err(EvalError::invalid(
                    file,
                    0,
                    format!("tools[{i}]"),
                    format!("tool {:?} is defined twice", t.function.name),
                ));
            }
        }
        if wire.cases.is_empty() {
            return Err(EvalError::invalid(
                file,
                0,
                "cases",
                "an eval set needs at least one case",
            ));
        }
        let mut cases = Vec::with_capacity(wire.cases.len());
        let mut ids: BTreeMap<String, usize> = BTreeMap::new();
        let mut case_lines = text.map(CaseLines::new);
        for (i, wc) in wire.cases.iter().enumerate() {
            let line = case_lines.as_mut().map_or(0, |c| c.line(&wc.id));
            let case = parse_case(wc, wire.system.as_deref(), &library).map_err(|(field, m)| {
                let field = if field.is_empty() {
                    format!("cases[{i}]")
                } else {
                    format!("cases[{i}].{field}")
                };
                EvalError::invalid(file, line, field, format!("case {:?}: {m}", wc.id))
            })?;
            if let Some(first) = ids.insert(case.id.clone(), line) {
                return Err(EvalError::invalid(
                    file,
                    line,
                    format!("cases[{i}].id"),
                    format!(
                        "case id {:?} is used twice (first on line {first})",
                        case.id
                    ),
                ));
            }
            cases.push(Case { line, ..case });
        }
        let sha256 = canonical_hash(&wire.name, &cases);
        Ok(Self {
            name: wire.name.clone(),
            description: wire.description.clone(),
            cases,
            sha256,
        })
    }

    /// The set's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The description.
    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }
    /// The cases, in file order.
    pub fn cases(&self) -> &[Case] {
        &self.cases
    }
    /// The case with this id.
    pub fn case(&self, id: &str) -> Option<&Case> {
        self.cases.iter().find(|c| c.id == id)
    }
    /// The version: SHA-256 (hex) of the canonical form (see the module docs).
    pub fn sha256(&self) -> &str {
        &self.sha256
    }
    /// The canonical form's bytes.
    pub fn canonical_json(&self) -> String {
        canonical_string(&self.name, &self.cases)
    }
}

fn parse_tool(t: &WireTool) -> Result<Tool, String> {
    if t.kind != "function" {
        return Err(format!("tool type must be \"function\", not {:?}", t.kind));
    }
    let spec = FunctionSpec::new(&t.function.name, &t.function.parameters)?;
    // The parameters must also be a usable JSON Schema (a model receives them as one).
    jsonschema::validator_for(&t.function.parameters).map_err(|e| {
        format!(
            "parameters of {} are not a valid JSON Schema: {e}",
            t.function.name
        )
    })?;
    Ok(Tool {
        wire: t.clone(),
        spec,
    })
}

type FieldErr = (String, String);

fn parse_case(
    wc: &WireCase,
    default_system: Option<&str>,
    library: &BTreeMap<String, Tool>,
) -> Result<Case, FieldErr> {
    let err = |field: &str, m: String| (field.to_owned(), m);
    if wc.id.trim().is_empty() || wc.id.chars().any(char::is_whitespace) {
        return Err(err(
            "id",
            format!("id {:?} must be non-empty and contain no whitespace", wc.id),
        ));
    }
    let category = Category::parse(&wc.category).map_err(|m| err("category", m))?;
    let mut system = match &wc.system {
        Some(s) if s.is_empty() => None,
        Some(s) => Some(s.clone()),
        None => default_system.map(str::to_owned),
    };
    let messages = match &wc.input {
        WireInput::Prompt(p) => {
            if p.trim().is_empty() {
                return Err(err("input", "the prompt is empty".into()));
            }
            vec![Message {
                role: Role::User,
                content: p.clone(),
            }]
        }
        WireInput::Messages(ms) => {
            if ms.is_empty() {
                return Err(err("input", "the message list is empty".into()));
            }
            let mut out = Vec::new();
            for (j, m) in ms.iter().enumerate() {
                let role = Role::parse(&m.role).ok_or_else(|| {
                    err(
                        &format!("input[{j}].role"),
                        format!("unknown role {:?} (system, user, assistant, tool)", m.role),
                    )
                })?;
                if role == Role::System {
                    if j != 0 || wc.system.is_some() {
                        return Err(err(
                            &format!("input[{j}]"),
                            "a system message may only come first, and not together with `system:`"
                                .into(),
                        ));
                    }
                    system = Some(m.content.clone());
                    continue;
                }
                out.push(Message {
                    role,
                    content: m.content.clone(),
                });
            }
            if out.is_empty() {
                return Err(err("input", "the conversation has no user message".into()));
            }
            out
        }
    };
    let mut tools = Vec::new();
    for (j, r) in wc.tools.iter().enumerate() {
        let tool = match r {
            WireToolRef::Name(n) => library.get(n).cloned().ok_or_else(|| {
                err(
                    &format!("tools[{j}]"),
                    format!("no tool named {n:?} in the set's `tools`"),
                )
            })?,
            WireToolRef::Inline(t) => parse_tool(t).map_err(|m| err(&format!("tools[{j}]"), m))?,
        };
        if tools.iter().any(|t: &Tool| t.name() == tool.name()) {
            return Err(err(
                &format!("tools[{j}]"),
                format!("tool {:?} is offered twice", tool.name()),
            ));
        }
        tools.push(tool);
    }
    if wc.checks.is_empty() {
        return Err(err(
            "checks",
            "a case needs at least one check, decided before any run".into(),
        ));
    }
    let mut type_counts: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &wc.checks {
        *type_counts.entry(c.type_name()).or_default() += 1;
    }
    let mut checks = Vec::new();
    let mut names = BTreeSet::new();
    for (j, c) in wc.checks.iter().enumerate() {
        let name = match c.explicit_name() {
            Some(n) => n.to_owned(),
            None if type_counts[c.type_name()] == 1 => c.type_name().to_owned(),
            None => format!("{}-{}", c.type_name(), j + 1),
        };
        if !names.insert(name.clone()) {
            return Err(err(
                &format!("checks[{j}].name"),
                format!("check name {name:?} is used twice in this case"),
            ));
        }
        let kind = parse_check(c, &name, &tools).map_err(|(f, m)| {
            let field = if f.is_empty() {
                format!("checks[{j}]")
            } else {
                format!("checks[{j}].{f}")
            };
            (field, m)
        })?;
        checks.push(Check { name, kind });
    }
    let weight = wc.weight.unwrap_or(1.0);
    if !(weight.is_finite() && weight >= 0.0) {
        return Err(err(
            "weight",
            format!("weight must be a finite number ≥ 0, not {weight}"),
        ));
    }
    let canonical = canonical_case(wc, system.as_deref(), &tools, weight);
    Ok(Case {
        id: wc.id.clone(),
        category,
        system,
        messages,
        tools,
        checks,
        weight,
        tags: wc.tags.clone(),
        line: 0,
        canonical,
    })
}

fn parse_check(c: &WireCheck, name: &str, tools: &[Tool]) -> Result<CheckKind, FieldErr> {
    fn f(field: &str) -> impl Fn(String) -> FieldErr + '_ {
        move |m: String| (field.to_owned(), m)
    }
    let text = |op, ic, neg| {
        TextCheck::new(op, ic, neg)
            .map(CheckKind::Text)
            .map_err(f(""))
    };
    match c {
        WireCheck::Equals {
            value,
            ignore_case,
            negate,
            ..
        } => text(TextOp::Equals(value.clone()), *ignore_case, *negate),
        WireCheck::StartsWith {
            value,
            ignore_case,
            negate,
            ..
        } => text(TextOp::StartsWith(value.clone()), *ignore_case, *negate),
        WireCheck::Contains {
            value,
            mode,
            ignore_case,
            negate,
            ..
        } => {
            let mode = match mode.as_deref() {
                None | Some("all") => Mode::All,
                Some("any") => Mode::Any,
                Some(o) => {
                    return Err((
                        "mode".into(),
                        format!("mode must be `all` or `any`, not {o:?}"),
                    ));
                }
            };
            text(
                TextOp::Contains {
                    needles: value.to_vec(),
                    mode,
                },
                *ignore_case,
                *negate,
            )
        }
        WireCheck::Regex {
            pattern,
            ignore_case,
            negate,
            ..
        } => {
            let re = regex::RegexBuilder::new(pattern)
                .case_insensitive(*ignore_case)
                .build()
                .map_err(|e| ("pattern".to_owned(), format!("invalid regex: {e}")))?;
            text(TextOp::Regex(re), *ignore_case, *negate)
        }
        WireCheck::Json { schema, source, .. } => {
            let source = match source.as_deref() {
                None | Some("auto") => JsonSource::Auto,
                Some("strict") => JsonSource::Strict,
                Some(o) => {
                    return Err((
                        "source".into(),
                        format!("source must be `auto` or `strict`, not {o:?}"),
                    ));
                }
            };
            JsonCheck::new(schema.as_ref(), source)
                .map(CheckKind::Json)
                .map_err(f("schema"))
        }
        WireCheck::ToolCall { calls, order, .. } => {
            let ordered = match order.as_deref() {
                None | Some("any") => false,
                Some("exact") => true,
                Some(o) => {
                    return Err((
                        "order".into(),
                        format!("order must be `any` or `exact`, not {o:?}"),
                    ));
                }
            };
            let mut expected = Vec::new();
            for (k, call) in calls.iter().enumerate() {
                let tool = tools
                    .iter()
                    .find(|t| t.name() == call.name)
                    .ok_or_else(|| {
                        (
                            format!("calls[{k}].name"),
                            format!(
                                "expects a call to {:?}, which the case does not offer in `tools`",
                                call.name
                            ),
                        )
                    })?;
                expected.push(
                    ExpectedCall::new(&tool.spec, &call.arguments, &call.free)
                        .map_err(f(&format!("calls[{k}].arguments")))?,
                );
            }
            ToolCallCheck::new(expected, ordered)
                .map(CheckKind::ToolCall)
                .map_err(f("calls"))
        }
        WireCheck::NoToolCall { .. } => Ok(CheckKind::NoToolCall(NoToolCallCheck)),
        WireCheck::Refusal {
            expect, patterns, ..
        } => {
            let expect = match expect.as_str() {
                "refuse" => Expect::Refuse,
                "answer" => Expect::Answer,
                o => {
                    return Err((
                        "expect".into(),
                        format!("expect must be `refuse` or `answer`, not {o:?}"),
                    ));
                }
            };
            RefusalCheck::new(expect, patterns.clone())
                .map(CheckKind::Refusal)
                .map_err(f("patterns"))
        }
        WireCheck::Language { code, .. } => LanguageCheck::new(code)
            .map(CheckKind::Language)
            .map_err(f("code")),
        WireCheck::Number {
            value,
            tolerance,
            pick,
            decimal,
            ..
        } => {
            let pick = match pick.as_deref() {
                None | Some("any") => Pick::Any,
                Some("first") => Pick::First,
                Some("last") => Pick::Last,
                Some(o) => {
                    return Err((
                        "pick".into(),
                        format!("pick must be `any`, `first` or `last`, not {o:?}"),
                    ));
                }
            };
            let decimal = match decimal.as_deref() {
                None | Some("point") => Decimal::Point,
                Some("comma") => Decimal::Comma,
                Some(o) => {
                    return Err((
                        "decimal".into(),
                        format!("decimal must be `point` or `comma`, not {o:?}"),
                    ));
                }
            };
            NumberCheck::new(*value, tolerance.unwrap_or(0.0), pick, decimal)
                .map(CheckKind::Number)
                .map_err(f(""))
        }
        WireCheck::Length {
            min_chars,
            max_chars,
            min_words,
            max_words,
            ..
        } => LengthCheck::new(*min_chars, *max_chars, *min_words, *max_words)
            .map(CheckKind::Length)
            .map_err(f("")),
        WireCheck::Judge {
            judge,
            rubric,
            rubric_sha256,
            ..
        } => JudgeCheck::new(name, judge, rubric, rubric_sha256.as_deref())
            .map(CheckKind::Judge)
            .map_err(f("rubric_sha256")),
    }
}

/// The case as it enters the canonical form: references resolved, defaults left out.
fn canonical_case(wc: &WireCase, system: Option<&str>, tools: &[Tool], weight: f64) -> WireCase {
    let checks = wc
        .checks
        .iter()
        .cloned()
        .map(|mut c| {
            let drop = |o: &mut Option<String>, default: &str| {
                if o.as_deref() == Some(default) {
                    *o = None;
                }
            };
            match &mut c {
                WireCheck::Contains { mode, .. } => drop(mode, "all"),
                WireCheck::Json { source, .. } => drop(source, "auto"),
                WireCheck::ToolCall { order, .. } => drop(order, "any"),
                WireCheck::Number {
                    tolerance,
                    pick,
                    decimal,
                    ..
                } => {
                    drop(pick, "any");
                    drop(decimal, "point");
                    if *tolerance == Some(0.0) {
                        *tolerance = None;
                    }
                }
                WireCheck::Judge { rubric_sha256, .. } => *rubric_sha256 = None,
                _ => {}
            }
            c
        })
        .collect();
    WireCase {
        id: wc.id.clone(),
        category: wc.category.clone(),
        input: wc.input.clone(),
        system: system.map(str::to_owned),
        tools: tools
            .iter()
            .map(|t| WireToolRef::Inline(t.wire.clone()))
            .collect(),
        checks,
        weight: if weight == 1.0 { None } else { Some(weight) },
        tags: wc.tags.clone(),
    }
}

fn canonical_string(name: &str, cases: &[Case]) -> String {
    let doc = serde_json::json!({
        "format": EVALSET_FORMAT,
        "name": name,
        "cases": cases.iter().map(|c| serde_json::to_value(&c.canonical).unwrap_or(Value::Null)).collect::<Vec<_>>(),
    });
    let mut out = String::new();
    write_canonical(&doc, &mut out);
    out
}

fn canonical_hash(name: &str, cases: &[Case]) -> String {
    hex::encode(Sha256::digest(canonical_string(name, cases).as_bytes()))
}

/// Writes JSON with object keys in byte order and no whitespace, independent of whether
/// `serde_json` preserves insertion order in this build.
pub(crate) fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                write_canonical(&map[k.as_str()], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The first line (1-based) containing `needle`, or 0.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .map_or(0, |i| i + 1)
}

/// Where each case's `id:` key stands in the text, found in one pass: a case's line is the first
/// line after the previous case's where an `id:` key (block or flow style, quoted or not) names
/// it — linear in the text however many cases it has (a set of tens of thousands of cases is
/// read in one pass, not once per case).
struct CaseLines {
    /// Every `id:` key's value with the lines it stands on, in order.
    lines: HashMap<String, Vec<usize>>,
    /// The line of the case found last.
    after: usize,
}

impl CaseLines {
    fn new(text: &str) -> Self {
        let mut lines: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, l) in text.lines().enumerate() {
            let mut rest = l;
            while let Some(pos) = rest.find("id:") {
                let key_starts_here = rest[..pos]
                    .chars()
                    .next_back()
                    .is_none_or(|c| c.is_whitespace() || c == '{' || c == ',' || c == '-');
                if key_starts_here {
                    let value = rest[pos + 3..].trim_start();
                    let token: String = match value.chars().next() {
                        Some(q @ ('"' | '\'')) => {
                            value[1..].chars().take_while(|c| *c != q).collect()
                        }
                        _ => value
                            .chars()
                            .take_while(|c| !c.is_whitespace() && *c != ',' && *c != '}')
                            .collect(),
                    };
                    let at = lines.entry(token).or_default();
                    if at.last() != Some(&(i + 1)) {
                        at.push(i + 1);
                    }
                }
                rest = &rest[pos + 3..];
            }
        }
        CaseLines { lines, after: 0 }
    }

    /// The line of the case with this id (0: not found), after the case found last.
    fn line(&mut self, id: &str) -> usize {
        let Some(at) = self.lines.get(id) else {
            return 0;
        };
        let i = at.partition_point(|line| *line <= self.after);
        match at.get(i) {
            Some(line) => {
                self.after = *line;
                *line
            }
            None => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_million_nested_brackets_are_refused_at_once_not_after_hours() {
        let n = 1_000_000;
        for (open, close) in [("[", "]"), ("{a: ", "}")] {
            let text = format!(
                "format: shortlist.evalset.v1\nname: deep\ncases:\n  - {}{}\n",
                open.repeat(n),
                close.repeat(n)
            );
            let started = std::time::Instant::now();
            let err = super::EvalSet::from_yaml("deep.yaml", &text).unwrap_err();
            assert!(
                err.to_string()
                    .starts_with("deep.yaml:4: brackets nest more than 256 deep"),
                "{err}"
            );
            assert!(started.elapsed() < std::time::Duration::from_secs(5));
        }
        // As deep as the deserializer allows is still an ordinary error, quickly.
        let text = format!(
            "format: shortlist.evalset.v1\nname: deep\ncases: {}{}\n",
            "[".repeat(200),
            "]".repeat(200)
        );
        let err = super::EvalSet::from_yaml("deep.yaml", &text).unwrap_err();
        assert!(err.to_string().contains("recursion limit"), "{err}");
    }

    use super::*;

    const SET: &str = r#"
format: shortlist.evalset.v1
name: demo
description: a tiny set
system: You are helpful.
tools:
  - type: function
    function:
      name: get_invoice
      parameters:
        type: object
        properties:
          invoice_id: {type: string}
        required: [invoice_id]
cases:
  - id: hello
    category: ordinary
    input: Say hello.
    checks:
      - type: contains
        value: hello
        ignore_case: true
  - id: invoice
    category: tool-call
    input: "Show me invoice INV-1"
    tools: [get_invoice]
    checks:
      - type: tool-call
        calls:
          - name: get_invoice
            arguments: {invoice_id: [INV-1]}
    weight: 2
"#;

    #[test]
    fn parses_and_hashes() {
        let s = EvalSet::from_yaml("demo.yaml", SET).unwrap();
        assert_eq!(s.cases().len(), 2);
        assert_eq!(s.cases()[1].tools()[0].name(), "get_invoice");
        assert_eq!(s.cases()[1].weight(), 2.0);
        assert_eq!(s.cases()[0].system(), Some("You are helpful."));
        assert_eq!(s.cases()[0].line(), 16);
        // Pinned: if this changes, every stored eval set gets a new version. Change the canonical
        // form only on purpose, and say so in the release notes.
        assert_eq!(
            s.sha256(),
            "51aada0fc2d082a06dfb018dced02bbf960976935e3969189ed515aacd46676c"
        );
    }

    #[test]
    fn hash_ignores_comments_order_description_and_defaults() {
        let a = EvalSet::from_yaml("a", SET).unwrap();
        let b_text = SET
            .replace("description: a tiny set\n", "# a comment\n")
            .replace(
                "        value: hello\n        ignore_case: true\n",
                "        ignore_case: true\n        value: hello\n        mode: all\n",
            );
        let b = EvalSet::from_yaml("b", &b_text).unwrap();
        assert_eq!(a.sha256(), b.sha256());
        let c = EvalSet::from_yaml("c", &SET.replace("Say hello.", "Say hi.")).unwrap();
        assert_ne!(a.sha256(), c.sha256());
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let bad = SET.replace("type: contains", "type: containz");
        let e = EvalSet::from_yaml("s.yaml", &bad).unwrap_err().to_string();
        assert!(
            e.starts_with("s.yaml:2") && e.contains("cases[0].checks[0]") && e.contains("containz"),
            "{e}"
        );

        let bad = SET.replace(
            "arguments: {invoice_id: [INV-1]}",
            "arguments: {invoice: [INV-1]}",
        );
        let e = EvalSet::from_yaml("s.yaml", &bad).unwrap_err().to_string();
        assert!(
            e.starts_with("s.yaml:23: field `cases[1].checks[0].calls[0].arguments`"),
            "{e}"
        );

        let bad = SET.replace("category: ordinary", "category: Ordinary!");
        let e = EvalSet::from_yaml("s.yaml", &bad).unwrap_err().to_string();
        assert!(e.starts_with("s.yaml:16: field `cases[0].category`"), "{e}");

        let bad = SET.replace("id: invoice", "id: hello");
        let e = EvalSet::from_yaml("s.yaml", &bad).unwrap_err().to_string();
        assert!(e.contains("used twice (first on line 16)"), "{e}");

        let bad = SET.replace("shortlist.evalset.v1", "shortlist.evalset.v2");
        let e = EvalSet::from_yaml("s.yaml", &bad).unwrap_err().to_string();
        assert!(
            e.starts_with("s.yaml:2: field `format`: unsupported format"),
            "{e}"
        );

        let bad = SET.replace("value: hello", "value: hello\n        colour: red");
        let e = EvalSet::from_yaml("s.yaml", &bad).unwrap_err().to_string();
        assert!(e.contains("colour"), "{e}");
    }

    proptest::proptest! {
        /// Writing a set as YAML and reading it back gives the same version, whatever the text.
        #[test]
        fn yaml_round_trip_keeps_the_version(
            prompts in proptest::collection::vec("[ -~äöüéñ€\n]{1,60}", 1..6),
            needle in "[a-zA-Z0-9 ]{1,12}",
            weight in 0u32..5,
        ) {
            use crate::wire::{OneOrMany, WireCase, WireCheck, WireInput};
            let cases = prompts
                .iter()
                .enumerate()
                .filter(|(_, p)| !p.trim().is_empty())
                .map(|(i, p)| WireCase {
                    id: format!("c{i}"),
                    category: "ordinary".into(),
                    input: WireInput::Prompt(p.clone()),
                    system: None,
                    tools: Vec::new(),
                    checks: vec![WireCheck::Contains {
                        name: None,
                        value: OneOrMany::One(needle.trim().to_owned() + "x"),
                        mode: None,
                        ignore_case: false,
                        negate: false,
                    }],
                    weight: Some(f64::from(weight)),
                    tags: Vec::new(),
                })
                .collect::<Vec<_>>();
            proptest::prop_assume!(!cases.is_empty());
            let wire = WireSet {
                format: EVALSET_FORMAT.into(),
                name: "p".into(),
                description: None,
                system: Some("sys".into()),
                tools: Vec::new(),
                cases,
            };
            let a = EvalSet::from_wire("w", &wire, None).unwrap();
            let yaml = serde_norway::to_string(&wire).unwrap();
            let b = EvalSet::from_yaml("y", &yaml).unwrap();
            proptest::prop_assert_eq!(a.sha256(), b.sha256());
            proptest::prop_assert_eq!(a.cases().len(), b.cases().len());
        }
    }

    proptest::proptest! {
        /// Bad input is an error, never a panic: random edits of a valid set, and random text.
        #[test]
        fn never_panics_on_bad_input(cut in 0usize..SET.len(), junk in ".{0,20}", text in ".{0,200}") {
            let mut edited = SET.to_owned();
            let at = (0..=cut).rev().find(|i| edited.is_char_boundary(*i)).unwrap_or(0);
            edited.insert_str(at, &junk);
            let _ = EvalSet::from_yaml("e.yaml", &edited);
            let _ = EvalSet::from_yaml("t.yaml", &text);
            let _ = crate::response::parse_outputs("o.jsonl", &text);
        }
    }

    #[test]
    fn case_lines_in_block_and_flow_style() {
        let text = "cases:\n  - {id: a, category: x}\n  - id: \"b\"\n  - {category: y, id: 'c'}\n  - tid: d\n";
        let mut lines = CaseLines::new(text);
        assert_eq!(lines.line("a"), 2);
        assert_eq!(lines.line("b"), 3);
        assert_eq!(lines.line("c"), 4);
        assert_eq!(lines.line("d"), 0);
        // An id that appears again further on (in a check's value, say) is found after the case
        // before it; one not after it is not found.
        let text = "cases:\n  - id: a\n  - id: b\n    note: {id: a}\n  - id: a\n";
        let mut lines = CaseLines::new(text);
        assert_eq!(lines.line("a"), 2);
        assert_eq!(lines.line("b"), 3);
        assert_eq!(lines.line("a"), 4);
        assert_eq!(lines.line("a"), 5);
        assert_eq!(lines.line("a"), 0);
    }

    #[test]
    fn regex_and_schema_errors_are_load_errors() {
        let bad = SET.replace(
            "      - type: contains\n        value: hello\n        ignore_case: true\n",
            "      - type: regex\n        pattern: \"([a-z\"\n",
        );
        let e = EvalSet::from_yaml("s.yaml", &bad).unwrap_err().to_string();
        assert!(
            e.contains("cases[0].checks[0].pattern") && e.contains("invalid regex"),
            "{e}"
        );
    }
}
