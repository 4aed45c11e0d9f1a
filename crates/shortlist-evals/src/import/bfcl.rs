//! BFCL (Berkeley Function Calling Leaderboard) pairs: a question file (JSONL:
//! `{"id", "question": [[{role, content}, ...]], "function": [{name, description, parameters}]}`)
//! and a `possible_answer` file (JSONL: `{"id", "ground_truth": [{"<function>": {"<param>":
//! [acceptable values]}}]}`).
//!
//! BFCL's schema spellings are converted to JSON Schema (`dict` → `object`, `float` → `number`,
//! `tuple` → `array`, `any` → no type) and dots in function names become underscores, as BFCL
//! itself does for OpenAI-style function calling. A question with an answer becomes a `tool-call`
//! check (several ground-truth calls match in any order, BFCL's "parallel"); an `irrelevance`
//! question (no answer line by design) becomes `no-tool-call`; any other question without an
//! answer is reported as unmapped. Multi-turn questions need BFCL's
//! stateful executors and are reported as unmapped.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::Imported;
use crate::error::EvalError;
use crate::wire::{
    WireCase, WireCheck, WireExpectedCall, WireFunction, WireInput, WireMessage, WireTool,
    WireToolRef,
};

/// Imports BFCL questions with their possible answers (if any).
pub fn import(
    question_file: &str,
    questions: &str,
    answer_file: &str,
    answers: Option<&str>,
    name: &str,
) -> Result<Imported, EvalError> {
    let mut imp = Imported::new(
        name,
        format!("Imported from BFCL questions in {question_file}."),
    );
    let mut key: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    if let Some(a) = answers {
        for (i, line) in a.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v = super::parse_json_line(answer_file, i + 1, line)?;
            let id = v
                .get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| EvalError::invalid(answer_file, i + 1, "id", "missing string id"))?;
            let gt = v
                .get("ground_truth")
                .and_then(Value::as_array)
                .ok_or_else(|| {
                    EvalError::invalid(answer_file, i + 1, "ground_truth", "missing list")
                })?;
            key.insert(id.to_owned(), gt.clone());
        }
    }
    let mut taken = super::TakenIds::default();
    for (i, line) in questions.lines().enumerate() {
        let lineno = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let at = |field: &str, m: String| EvalError::invalid(question_file, lineno, field, m);
        let v = super::parse_json_line(question_file, lineno, line)?;
        let src_id = v
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| at("id", "missing string id".into()))?;
        let id = super::unique_id(super::slug(src_id), &mut taken);
        let turns = v
            .get("question")
            .and_then(Value::as_array)
            .ok_or_else(|| at("question", "missing list of turns".into()))?;
        if turns.len() != 1 {
            imp.add_unmapped(
                &id,
                "multi-turn question",
                "needs BFCL's stateful executors; not imported",
            );
            continue;
        }
        let msgs = turns[0]
            .as_array()
            .ok_or_else(|| at("question[0]", "a turn must be a list of messages".into()))?;
        let mut messages = Vec::new();
        for (k, m) in msgs.iter().enumerate() {
            let role = m
                .get("role")
                .and_then(Value::as_str)
                .ok_or_else(|| at(&format!("question[0][{k}].role"), "missing".into()))?;
            let content = m
                .get("content")
                .and_then(Value::as_str)
                .ok_or_else(|| at(&format!("question[0][{k}].content"), "missing".into()))?;
            messages.push(WireMessage {
                role: role.into(),
                content: content.into(),
            });
        }
        let funcs = v
            .get("function")
            .and_then(Value::as_array)
            .ok_or_else(|| at("function", "missing list".into()))?;
        let mut tools = Vec::new();
        for (k, f) in funcs.iter().enumerate() {
            let fname = f
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| at(&format!("function[{k}].name"), "missing".into()))?;
            let params = f
                .get("parameters")
                .cloned()
                .unwrap_or_else(|| serde_json::json!({"type": "dict", "properties": {}}));
            tools.push(WireToolRef::Inline(WireTool {
                kind: "function".into(),
                function: WireFunction {
                    name: fname.replace('.', "_"),
                    description: f
                        .get("description")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    parameters: to_json_schema(&params),
                },
            }));
        }
        let check = match key.get(src_id) {
            None if !src_id.contains("irrelevance") => {
                imp.add_unmapped(
                    &id,
                    "question without answer",
                    format!("no ground truth for {src_id} in {answer_file}; not imported"),
                );
                continue;
            }
            None => WireCheck::NoToolCall { name: None },
            Some(gt) => {
                let mut calls = Vec::new();
                for c in gt {
                    let obj = c.as_object().filter(|o| o.len() == 1).ok_or_else(|| {
                        EvalError::invalid(
                            answer_file,
                            0,
                            "ground_truth",
                            format!("{src_id}: each call must be {{name: {{param: [values]}}}}"),
                        )
                    })?;
                    let (fname, args) = obj
                        .iter()
                        .next()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .unwrap_or_default();
                    let arguments: Map<String, Value> =
                        args.as_object().cloned().unwrap_or_default();
                    calls.push(WireExpectedCall {
                        name: fname.replace('.', "_"),
                        arguments,
                        free: Vec::new(),
                    });
                }
                WireCheck::ToolCall {
                    name: None,
                    calls,
                    order: None,
                }
            }
        };
        imp.push_case(WireCase {
            id,
            category: "tool-call".into(),
            input: WireInput::Messages(messages),
            system: None,
            tools,
            checks: vec![check],
            weight: None,
            tags: vec![format!("bfcl:{src_id}")],
        });
    }
    Ok(imp)
}

/// Converts BFCL's schema spellings to JSON Schema, recursively.
fn to_json_schema(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, x) in m {
                if k == "type" {
                    match x.as_str() {
                        Some("dict") => {
                            out.insert(k.clone(), "object".into());
                        }
                        Some("float") => {
                            out.insert(k.clone(), "number".into());
                        }
                        Some("tuple") => {
                            out.insert(k.clone(), "array".into());
                        }
                        Some("any") => {}
                        _ => {
                            out.insert(k.clone(), x.clone());
                        }
                    }
                } else if k == "properties" {
                    let props = x
                        .as_object()
                        .map(|p| {
                            p.iter()
                                .map(|(n, s)| (n.clone(), to_json_schema(s)))
                                .collect::<Map<_, _>>()
                        })
                        .unwrap_or_default();
                    out.insert(k.clone(), Value::Object(props));
                } else if k == "items" {
                    out.insert(k.clone(), to_json_schema(x));
                } else {
                    out.insert(k.clone(), x.clone());
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::response::{Response, ToolCall};
    use crate::set::EvalSet;

    const Q: &str = r#"{"id":"simple_python_0","question":[[{"role":"user","content":"Find the area of a triangle with a base of 10 units and height of 5 units."}]],"function":[{"name":"calculate_triangle_area","description":"Calculate the area of a triangle given its base and height.","parameters":{"type":"dict","properties":{"base":{"type":"integer","description":"The base of the triangle."},"height":{"type":"integer","description":"The height of the triangle."},"unit":{"type":"string","description":"The unit of measure (defaults to 'units' if not specified)"}},"required":["base","height"]}}]}
{"id":"irrelevance_0","question":[[{"role":"user","content":"Calculate the area of a triangle given the base is 10 meters and height is 5 meters."}]],"function":[{"name":"math.determinant","description":"Calculate the determinant of a matrix.","parameters":{"type":"dict","properties":{"matrix":{"type":"array","items":{"type":"array","items":{"type":"float"}},"description":"The matrix."}},"required":["matrix"]}}]}
{"id":"multi_turn_base_0","question":[[{"role":"user","content":"a"}],[{"role":"user","content":"b"}]],"function":[]}
"#;
    const A: &str = r#"{"id":"simple_python_0","ground_truth":[{"calculate_triangle_area":{"base":[10],"height":[5],"unit":["units",""]}}]}
"#;

    #[test]
    fn imports_questions_and_answers() {
        let imp = import("q.jsonl", Q, "a.jsonl", Some(A), "bfcl").unwrap();
        assert_eq!(imp.set.cases.len(), 2);
        assert_eq!(imp.unmapped.len(), 1);
        let set = EvalSet::from_yaml("o.yaml", &imp.to_yaml("o.yaml").unwrap()).unwrap();
        let simple = &set.cases()[0];
        assert_eq!(simple.id(), "simple-python-0");
        let call = |args: Value| {
            Response::new(
                "",
                vec![ToolCall::new(
                    "calculate_triangle_area",
                    args.as_object().unwrap().clone(),
                )],
                None,
            )
        };
        assert!(
            simple.checks()[0]
                .score(&call(json!({"base": 10, "height": 5})))
                .passed()
        );
        assert!(
            simple.checks()[0]
                .score(&call(json!({"base": 10, "height": 5, "unit": "Units"})))
                .passed()
        );
        assert!(
            !simple.checks()[0]
                .score(&call(json!({"base": 10.5, "height": 5})))
                .passed()
        );
        let irr = &set.cases()[1];
        assert_eq!(irr.tools()[0].name(), "math_determinant");
        assert!(
            irr.checks()[0]
                .score(&Response::text_only("The area is 25 square meters."))
                .passed()
        );
        assert!(
            !irr.checks()[0]
                .score(&Response::new(
                    "",
                    vec![ToolCall::from_openai("math_determinant", "{")],
                    None
                ))
                .passed()
        );
    }
}
