//! Tool-call scoring with the Berkeley Function Calling Leaderboard's AST semantics.
//!
//! An expected call names a function and, per argument, a list of acceptable values; `""` in the
//! list means the argument may be left out. A made call is checked in BFCL's order, and the first
//! failure is reported with a stable code:
//!
//! 1. the arguments parse as a JSON object (`malformed_call`) — a malformed call is a call, never
//!    "no call";
//! 2. the function name matches (`wrong_func_name`);
//! 3. every parameter the schema marks `required` is present (`missing_required`);
//! 4. every supplied parameter is in both the schema and the answer key (`unexpected_param`);
//! 5. types match the schema (`type_error:<type>`): an integer is accepted where a number (float)
//!    is expected, never the reverse, and a boolean is never a number;
//! 6. the value is one of the acceptable values (`value_error:string|list|dict|others`). Strings
//!    are normalised before comparing: lowercased, `'` read as `"`, and the characters
//!    ` ,./-_*^` removed. Numbers compare by value (5 equals 5.0 where a float is expected).
//!    Lists compare element by element, objects key by key, with the same rules inside;
//! 7. an answer-key argument that is not optional was supplied (`missing_answer_param`).
//!
//! One extension to BFCL: an expected call may name `free` arguments (free text such as a ticket
//! description) whose value is not compared; their type is still checked.
//!
//! Several expected calls are matched to the calls made in any order (BFCL "parallel") unless the
//! check asks for `exact` order; the number of calls must match (`wrong_call_count`), and no call
//! at all is `no_call`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::{Scorer, Verdict};
use crate::response::{Response, ToolCall};

/// A parameter type from a tool's JSON Schema (BFCL's spellings `dict`, `float` and `tuple` too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamType {
    /// `string`.
    String,
    /// `integer`.
    Integer,
    /// `number` or `float`.
    Number,
    /// `boolean`.
    Boolean,
    /// `array` or `tuple`, with the item type if the schema gives one.
    Array(Option<Box<ParamType>>),
    /// `object` or `dict`.
    Object,
    /// No usable `type` (absent, a union, or unknown): any value type-checks.
    Any,
}

impl ParamType {
    fn from_schema(schema: &Value) -> Self {
        match schema.get("type").and_then(Value::as_str) {
            Some("string") => Self::String,
            Some("integer") => Self::Integer,
            Some("number" | "float") => Self::Number,
            Some("boolean") => Self::Boolean,
            Some("array" | "tuple") => {
                Self::Array(schema.get("items").map(|i| Box::new(Self::from_schema(i))))
            }
            Some("object" | "dict") => Self::Object,
            _ => Self::Any,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Integer => "integer",
            Self::Number => "float",
            Self::Boolean => "boolean",
            Self::Array(_) => "list",
            Self::Object => "dict",
            Self::Any => "any",
        }
    }

    /// Whether `v` has this type (integer promotes to float; booleans are not numbers).
    pub fn accepts(&self, v: &Value) -> bool {
        match self {
            Self::String => v.is_string(),
            Self::Integer => v.is_i64() || v.is_u64(),
            Self::Number => v.is_number(),
            Self::Boolean => v.is_boolean(),
            Self::Array(inner) => v.as_array().is_some_and(|items| {
                inner
                    .as_ref()
                    .is_none_or(|t| items.iter().all(|i| t.accepts(i)))
            }),
            Self::Object => v.is_object(),
            Self::Any => true,
        }
    }
}

/// A function's signature, read from its JSON Schema `parameters`.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionSpec {
    name: String,
    params: BTreeMap<String, ParamType>,
    required: BTreeSet<String>,
}

impl FunctionSpec {
    /// Reads `name` and its `parameters` schema (`{type: object|dict, properties, required}`).
    pub fn new(name: &str, parameters: &Value) -> Result<Self, String> {
        if name.trim().is_empty() {
            return Err("function name is empty".into());
        }
        let ty = parameters
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("object");
        if ty != "object" && ty != "dict" {
            return Err(format!(
                "parameters must be an object schema, not type {ty:?}"
            ));
        }
        let mut params = BTreeMap::new();
        if let Some(props) = parameters.get("properties") {
            let props = props.as_object().ok_or("`properties` must be a mapping")?;
            for (k, v) in props {
                params.insert(k.clone(), ParamType::from_schema(v));
            }
        }
        let mut required = BTreeSet::new();
        if let Some(req) = parameters.get("required") {
            for r in req.as_array().ok_or("`required` must be a list")? {
                let r = r.as_str().ok_or("`required` must list names")?;
                if !params.contains_key(r) {
                    return Err(format!("required parameter {r:?} is not in `properties`"));
                }
                required.insert(r.to_owned());
            }
        }
        Ok(Self {
            name: name.to_owned(),
            params,
            required,
        })
    }

    /// The function name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The acceptable values of one argument.
#[derive(Debug, Clone, PartialEq)]
struct Acceptable {
    values: Vec<Value>,
    optional: bool,
    /// Any value of the right type is accepted.
    free: bool,
}

/// One expected call: the function and its answer key.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpectedCall {
    spec: FunctionSpec,
    answer: BTreeMap<String, Acceptable>,
}

impl ExpectedCall {
    /// Builds an expected call, rejecting answer keys that could never be met: an argument the
    /// schema lacks, a required parameter left out of the key, or a value of the wrong type.
    /// Parameters named in `free` accept any value of their type (see the wire format).
    pub fn new(
        spec: &FunctionSpec,
        arguments: &Map<String, Value>,
        free: &[String],
    ) -> Result<Self, String> {
        let mut answer = BTreeMap::new();
        for k in free {
            if !spec.params.contains_key(k) {
                return Err(format!(
                    "free argument {k:?} is not a parameter of {}",
                    spec.name
                ));
            }
            if arguments.contains_key(k) {
                return Err(format!(
                    "argument {k:?} is both free and given acceptable values"
                ));
            }
            answer.insert(
                k.clone(),
                Acceptable {
                    values: Vec::new(),
                    optional: true,
                    free: true,
                },
            );
        }
        for (k, v) in arguments {
            let ty = spec
                .params
                .get(k)
                .ok_or_else(|| format!("argument {k:?} is not a parameter of {}", spec.name))?;
            let listed = match v {
                Value::Array(items) => items.clone(),
                other => vec![other.clone()],
            };
            let optional = listed.iter().any(|x| x.as_str() == Some(""));
            let values: Vec<Value> = listed
                .into_iter()
                .filter(|x| x.as_str() != Some(""))
                .collect();
            if values.is_empty() && !optional {
                return Err(format!("argument {k:?} lists no acceptable value"));
            }
            if let Some(bad) = values.iter().find(|x| !ty.accepts(x)) {
                return Err(format!(
                    "acceptable value {bad} of {k:?} is not of the schema's type {}",
                    ty.name()
                ));
            }
            answer.insert(
                k.clone(),
                Acceptable {
                    values,
                    optional,
                    free: false,
                },
            );
        }
        if let Some(r) = spec.required.iter().find(|r| !answer.contains_key(*r)) {
            return Err(format!(
                "required parameter {r:?} of {} is missing from the expected arguments",
                spec.name
            ));
        }
        Ok(Self {
            spec: spec.clone(),
            answer,
        })
    }

    /// Checks one made call against this expectation (steps 2–7 of the module docs).
    pub fn check(&self, call: &ToolCall) -> Result<(), (String, String)> {
        let args = call.arguments().map_err(|e| {
            (
                "malformed_call".to_owned(),
                format!("call to {}: {e}", call.name()),
            )
        })?;
        if call.name() != self.spec.name {
            return Err((
                "wrong_func_name".into(),
                format!("expected a call to {}, got {}", self.spec.name, call.name()),
            ));
        }
        if let Some(r) = self.spec.required.iter().find(|r| !args.contains_key(*r)) {
            return Err((
                format!("missing_required:{r}"),
                format!("required parameter {r:?} is missing"),
            ));
        }
        for k in args.keys() {
            if !self.spec.params.contains_key(k) || !self.answer.contains_key(k) {
                return Err((
                    format!("unexpected_param:{k}"),
                    format!("unexpected parameter {k:?}"),
                ));
            }
        }
        for (k, got) in args {
            let ty = &self.spec.params[k];
            if !ty.accepts(got) {
                return Err((
                    format!("type_error:{}", ty.name()),
                    format!("parameter {k:?}: {got} is not of type {}", ty.name()),
                ));
            }
            let key = &self.answer[k];
            if !key.free && !key.values.iter().any(|want| value_eq(got, want)) {
                let kind = match got {
                    Value::String(_) => "string",
                    Value::Array(_) => "list",
                    Value::Object(_) => "dict",
                    _ => "others",
                };
                return Err((
                    format!("value_error:{kind}"),
                    format!("parameter {k:?}: {got} is not one of {:?}", key.values),
                ));
            }
        }
        for (k, key) in &self.answer {
            if !key.optional && !args.contains_key(k) {
                return Err((
                    format!("missing_answer_param:{k}"),
                    format!("parameter {k:?} must be given (one of {:?})", key.values),
                ));
            }
        }
        Ok(())
    }

    /// The function this call expects.
    pub fn function(&self) -> &str {
        &self.spec.name
    }
}

/// BFCL's string normalisation.
pub fn normalize(s: &str) -> String {
    s.chars()
        .filter(|c| !" ,./-_*^".contains(*c))
        .map(|c| if c == '\'' { '"' } else { c })
        .flat_map(char::to_lowercase)
        .collect()
}

fn value_eq(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (Value::String(g), Value::String(w)) => normalize(g) == normalize(w),
        (Value::Number(g), Value::Number(w)) => g.as_f64() == w.as_f64(),
        (Value::Array(g), Value::Array(w)) => {
            g.len() == w.len() && g.iter().zip(w).all(|(a, b)| value_eq(a, b))
        }
        (Value::Object(g), Value::Object(w)) => {
            g.len() == w.len()
                && g.iter()
                    .all(|(k, v)| w.get(k).is_some_and(|wv| value_eq(v, wv)))
        }
        _ => got == want,
    }
}

/// A tool-call check: the expected calls, in any order or in exactly this order.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallCheck {
    calls: Vec<ExpectedCall>,
    ordered: bool,
}

impl ToolCallCheck {
    /// At least one expected call.
    pub fn new(calls: Vec<ExpectedCall>, ordered: bool) -> Result<Self, String> {
        if calls.is_empty() {
            return Err(
                "a tool-call check needs at least one expected call (use no-tool-call for none)"
                    .into(),
            );
        }
        Ok(Self { calls, ordered })
    }

    /// The expected calls.
    pub fn calls(&self) -> &[ExpectedCall] {
        &self.calls
    }
}

impl Scorer for ToolCallCheck {
    fn score(&self, response: &Response) -> Verdict {
        let made = response.tool_calls();
        if let Some(bad) = made.iter().find(|c| c.arguments().is_err()) {
            let why = bad.arguments().err().unwrap_or_default();
            return Verdict::fail_code("malformed_call", format!("call to {}: {why}", bad.name()));
        }
        if made.is_empty() {
            return Verdict::fail_code("no_call", "the model made no tool call");
        }
        if made.len() != self.calls.len() {
            return Verdict::fail_code(
                "wrong_call_count",
                format!(
                    "expected {} call{}, got {}",
                    self.calls.len(),
                    if self.calls.len() == 1 { "" } else { "s" },
                    made.len()
                ),
            );
        }
        if self.ordered || self.calls.len() == 1 {
            for (want, got) in self.calls.iter().zip(made) {
                if let Err((code, why)) = want.check(got) {
                    return Verdict::fail_code(code, why);
                }
            }
            return Verdict::pass();
        }
        // Parallel calls: look for an assignment of made calls to expected calls.
        let fits: Vec<Vec<bool>> = self
            .calls
            .iter()
            .map(|w| made.iter().map(|g| w.check(g).is_ok()).collect())
            .collect();
        let mut used = vec![false; made.len()];
        if assign(&fits, 0, &mut used) {
            return Verdict::pass();
        }
        // Report the first expected call that no made call satisfies, with the in-order error.
        for (i, want) in self.calls.iter().enumerate() {
            if !fits[i].iter().any(|f| *f) {
                let (code, why) = want.check(&made[i]).err().unwrap_or_default();
                return Verdict::fail_code(
                    code,
                    format!("no call satisfies expected call {}: {why}", i + 1),
                );
            }
        }
        Verdict::fail_code(
            "wrong_call_set",
            "the calls cannot be matched one-to-one to the expected calls",
        )
    }
}

fn assign(fits: &[Vec<bool>], i: usize, used: &mut [bool]) -> bool {
    if i == fits.len() {
        return true;
    }
    for j in 0..used.len() {
        if fits[i][j] && !used[j] {
            used[j] = true;
            if assign(fits, i + 1, used) {
                return true;
            }
            used[j] = false;
        }
    }
    false
}

/// Passes when the model made no tool call. A malformed call is a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NoToolCallCheck;

impl Scorer for NoToolCallCheck {
    fn score(&self, response: &Response) -> Verdict {
        match response.tool_calls().first() {
            None => Verdict::pass(),
            Some(c) if c.arguments().is_err() => Verdict::fail_code(
                "malformed_call",
                format!(
                    "the model attempted a call to {} (malformed); that is not abstaining",
                    c.name()
                ),
            ),
            Some(c) => {
                Verdict::fail_code("unexpected_call", format!("the model called {}", c.name()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec() -> FunctionSpec {
        FunctionSpec::new(
            "apply_credit",
            &json!({"type": "object",
                    "properties": {"account_id": {"type": "string"},
                                   "amount": {"type": "number"},
                                   "months": {"type": "integer"},
                                   "reason": {"type": "string"},
                                   "notify": {"type": "boolean"},
                                   "seats": {"type": "array", "items": {"type": "integer"}}},
                    "required": ["account_id", "amount"]}),
        )
        .unwrap()
    }

    fn expected(args: Value) -> ExpectedCall {
        ExpectedCall::new(&spec(), args.as_object().unwrap(), &[]).unwrap()
    }

    fn code(e: &ExpectedCall, args: Value) -> Option<String> {
        let call = ToolCall::new("apply_credit", args.as_object().unwrap().clone());
        e.check(&call).err().map(|(c, _)| c)
    }

    #[test]
    fn int_promotes_to_float_but_not_back() {
        let e = expected(json!({"account_id": ["ACME-1"], "amount": [20.0], "months": [3, ""]}));
        assert_eq!(
            code(&e, json!({"account_id": "ACME-1", "amount": 20})),
            None
        );
        assert_eq!(
            code(&e, json!({"account_id": "ACME-1", "amount": 20.0})),
            None
        );
        assert_eq!(
            code(
                &e,
                json!({"account_id": "ACME-1", "amount": 20, "months": 3.0})
            )
            .as_deref(),
            Some("type_error:integer")
        );
        assert_eq!(
            code(&e, json!({"account_id": "ACME-1", "amount": "20"})).as_deref(),
            Some("type_error:float")
        );
        assert_eq!(
            code(&e, json!({"account_id": "ACME-1", "amount": true})).as_deref(),
            Some("type_error:float")
        );
    }

    #[test]
    fn optional_parameters_and_missing_ones() {
        let e = expected(
            json!({"account_id": ["ACME-1"], "amount": [20], "months": [3, ""], "notify": [true]}),
        );
        // months optional: may be left out; notify has no "" so must be given.
        assert_eq!(
            code(&e, json!({"account_id": "ACME-1", "amount": 20})).as_deref(),
            Some("missing_answer_param:notify")
        );
        assert_eq!(
            code(
                &e,
                json!({"account_id": "ACME-1", "amount": 20, "notify": true})
            ),
            None
        );
        assert_eq!(
            code(&e, json!({"amount": 20, "notify": true})).as_deref(),
            Some("missing_required:account_id")
        );
    }

    #[test]
    fn string_normalisation() {
        let e =
            expected(json!({"account_id": ["ACME-1"], "amount": [5], "reason": ["billing error"]}));
        for ok in ["acme-1", "ACME 1", "acme_1", "Acme.1"] {
            assert_eq!(
                code(
                    &e,
                    json!({"account_id": ok, "amount": 5, "reason": "Billing-Error"})
                ),
                None,
                "{ok}"
            );
        }
        assert_eq!(
            code(
                &e,
                json!({"account_id": "ACME-2", "amount": 5, "reason": "billing error"})
            )
            .as_deref(),
            Some("value_error:string")
        );
        assert_eq!(normalize("It's A-B"), "it\"sab");
    }

    #[test]
    fn extra_parameters_are_rejected() {
        let e = expected(json!({"account_id": ["ACME-1"], "amount": [5]}));
        // In the schema but not in the answer key.
        assert_eq!(
            code(
                &e,
                json!({"account_id": "ACME-1", "amount": 5, "reason": "x"})
            )
            .as_deref(),
            Some("unexpected_param:reason")
        );
        // Not in the schema at all.
        assert_eq!(
            code(
                &e,
                json!({"account_id": "ACME-1", "amount": 5, "color": "red"})
            )
            .as_deref(),
            Some("unexpected_param:color")
        );
    }

    #[test]
    fn lists_and_values() {
        let e = expected(json!({"account_id": ["ACME-1"], "amount": [5, 10], "seats": [[1, 2]]}));
        assert_eq!(
            code(
                &e,
                json!({"account_id": "ACME-1", "amount": 10, "seats": [1, 2]})
            ),
            None
        );
        assert_eq!(
            code(
                &e,
                json!({"account_id": "ACME-1", "amount": 7, "seats": [1, 2]})
            )
            .as_deref(),
            Some("value_error:others")
        );
        assert_eq!(
            code(
                &e,
                json!({"account_id": "ACME-1", "amount": 5, "seats": [2, 1]})
            )
            .as_deref(),
            Some("value_error:list")
        );
        assert_eq!(
            code(
                &e,
                json!({"account_id": "ACME-1", "amount": 5, "seats": [1.5]})
            )
            .as_deref(),
            Some("type_error:list")
        );
    }

    #[test]
    fn wrong_name_malformed_and_no_call() {
        let e = expected(json!({"account_id": ["ACME-1"], "amount": [5]}));
        let check = ToolCallCheck::new(vec![e], false).unwrap();
        let wrong = Response::new("", vec![ToolCall::new("refund", Map::new())], None);
        assert_eq!(check.score(&wrong).code.as_deref(), Some("wrong_func_name"));
        let bad = Response::new(
            "",
            vec![ToolCall::from_openai("apply_credit", "{\"account_id\": ")],
            None,
        );
        assert_eq!(check.score(&bad).code.as_deref(), Some("malformed_call"));
        assert_eq!(
            check.score(&Response::text_only("Done!")).code.as_deref(),
            Some("no_call")
        );
        // A malformed call is not abstention either.
        assert_eq!(
            NoToolCallCheck.score(&bad).code.as_deref(),
            Some("malformed_call")
        );
        assert!(
            NoToolCallCheck
                .score(&Response::text_only("No tools needed."))
                .passed()
        );
    }

    #[test]
    fn parallel_calls_in_any_order() {
        let a = expected(json!({"account_id": ["A"], "amount": [5]}));
        let b = expected(json!({"account_id": ["B"], "amount": [7]}));
        let call = |id: &str, amt: i64| {
            ToolCall::new(
                "apply_credit",
                json!({"account_id": id, "amount": amt})
                    .as_object()
                    .unwrap()
                    .clone(),
            )
        };
        let any = ToolCallCheck::new(vec![a.clone(), b.clone()], false).unwrap();
        let exact = ToolCallCheck::new(vec![a, b], true).unwrap();
        let swapped = Response::new("", vec![call("B", 7), call("A", 5)], None);
        assert!(any.score(&swapped).passed());
        assert!(!exact.score(&swapped).passed());
        let one = Response::new("", vec![call("A", 5)], None);
        assert_eq!(any.score(&one).code.as_deref(), Some("wrong_call_count"));
    }

    #[test]
    fn free_arguments_accept_any_value_of_their_type() {
        let free = vec!["reason".to_owned()];
        let e = ExpectedCall::new(
            &spec(),
            json!({"account_id": ["A"], "amount": [5]})
                .as_object()
                .unwrap(),
            &free,
        )
        .unwrap();
        assert_eq!(
            code(
                &e,
                json!({"account_id": "A", "amount": 5, "reason": "anything at all"})
            ),
            None
        );
        assert_eq!(code(&e, json!({"account_id": "A", "amount": 5})), None);
        assert_eq!(
            code(&e, json!({"account_id": "A", "amount": 5, "reason": 3})).as_deref(),
            Some("type_error:string")
        );
        assert!(
            ExpectedCall::new(
                &spec(),
                json!({"account_id": ["A"], "amount": [5]})
                    .as_object()
                    .unwrap(),
                &["nope".to_owned()]
            )
            .is_err()
        );
    }

    proptest::proptest! {
        #[test]
        fn normalisation_is_idempotent_and_values_match_themselves(s in ".{0,40}", x in -1e6f64..1e6) {
            let once = normalize(&s);
            proptest::prop_assert_eq!(normalize(&once), once.clone());
            proptest::prop_assert!(value_eq(&json!(s), &json!(s)));
            proptest::prop_assert!(value_eq(&json!(x), &json!(x)));
            proptest::prop_assert!(value_eq(&json!([s.clone(), x]), &json!([s, x])));
        }
    }

    #[test]
    fn impossible_answer_keys_are_rejected_at_load() {
        let s = spec();
        assert!(ExpectedCall::new(&s, json!({"amount": [5]}).as_object().unwrap(), &[]).is_err());
        assert!(
            ExpectedCall::new(
                &s,
                json!({"account_id": ["a"], "amount": ["5"]})
                    .as_object()
                    .unwrap(),
                &[]
            )
            .is_err()
        );
        assert!(
            ExpectedCall::new(
                &s,
                json!({"account_id": ["a"], "amount": [5], "zzz": [1]})
                    .as_object()
                    .unwrap(),
                &[]
            )
            .is_err()
        );
    }
}
