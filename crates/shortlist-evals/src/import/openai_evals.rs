//! OpenAI evals samples (JSONL): `{"input": "text" | [chat messages], "ideal": "text" | ["text", ...]}`.
//!
//! The check follows the eval template: `Includes` (default) → contains any of the ideal answers;
//! `Match` → the output starts with one of them (a regex anchored at the start). Other keys on a
//! line are kept as tags only if they are strings; model-graded samples (no `ideal`) are unmapped.

use serde_json::Value;

use super::Imported;
use crate::error::EvalError;
use crate::wire::{OneOrMany, WireCase, WireCheck, WireInput, WireMessage};

/// Which openai/evals template the samples were written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Template {
    /// `evals.elsuite.basic.includes:Includes`.
    Includes,
    /// `evals.elsuite.basic.match:Match`.
    Match,
}

/// Imports samples; ids are `<name>-<line>`.
pub fn import(
    file: &str,
    text: &str,
    name: &str,
    template: Template,
) -> Result<Imported, EvalError> {
    let mut imp = Imported::new(
        name,
        format!("Imported from OpenAI evals samples in {file}."),
    );
    let mut taken = super::TakenIds::default();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let v = super::parse_json_line(file, lineno, line)?;
        let id = super::unique_id(format!("{name}-{lineno}"), &mut taken);
        let input = parse_input(v.get("input"))
            .map_err(|m| EvalError::invalid(file, lineno, "input", m))?;
        let ideals: Vec<String> = match v.get("ideal") {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| x.as_str().map(str::to_owned))
                .collect::<Option<_>>()
                .ok_or_else(|| {
                    EvalError::invalid(
                        file,
                        lineno,
                        "ideal",
                        "must be a string or a list of strings",
                    )
                })?,
            Some(_) => {
                return Err(EvalError::invalid(
                    file,
                    lineno,
                    "ideal",
                    "must be a string or a list of strings",
                ));
            }
            None => {
                imp.add_unmapped(
                    &id,
                    "sample without ideal",
                    "model-graded samples need a judge check; not imported",
                );
                continue;
            }
        };
        let ideals: Vec<String> = ideals.into_iter().filter(|s| !s.is_empty()).collect();
        if ideals.is_empty() {
            imp.add_unmapped(&id, "ideal", "empty ideal answer; not imported");
            continue;
        }
        let check = match template {
            Template::Includes => WireCheck::Contains {
                name: None,
                value: OneOrMany::Many(ideals),
                mode: Some("any".into()),
                ignore_case: false,
                negate: false,
            },
            Template::Match => WireCheck::Regex {
                name: None,
                pattern: format!(
                    r"\A\s*(?:{})",
                    ideals
                        .iter()
                        .map(|s| regex::escape(s))
                        .collect::<Vec<_>>()
                        .join("|")
                ),
                ignore_case: false,
                negate: false,
            },
        };
        imp.push_case(WireCase {
            id,
            category: "ordinary".into(),
            input,
            system: None,
            tools: Vec::new(),
            checks: vec![check],
            weight: None,
            tags: Vec::new(),
        });
    }
    Ok(imp)
}

/// A prompt string or a list of `{role, content}` messages.
pub(crate) fn parse_input(v: Option<&Value>) -> Result<WireInput, String> {
    match v {
        Some(Value::String(s)) => Ok(WireInput::Prompt(s.clone())),
        Some(Value::Array(ms)) => ms
            .iter()
            .map(|m| {
                let role = m
                    .get("role")
                    .and_then(Value::as_str)
                    .ok_or("a message needs a string `role`")?;
                let content = match m.get("content") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => parts
                        .iter()
                        .filter_map(|p| p.get("text").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join("\n"),
                    _ => return Err("a message needs a string `content`"),
                };
                Ok(WireMessage {
                    role: role.to_owned(),
                    content,
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(WireInput::Messages)
            .map_err(str::to_owned),
        _ => Err("missing: a string or a list of chat messages".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSONL: &str = r#"{"input":[{"role":"system","content":"Answer concisely."},{"role":"user","content":"Capital of France?"}],"ideal":["Paris"]}
{"input":"2+2?","ideal":"4"}

{"input":"Rate this","choice_strings":["A","B"]}
"#;

    #[test]
    fn imports_samples() {
        let imp = import("s.jsonl", JSONL, "geo", Template::Includes).unwrap();
        assert_eq!(imp.set.cases.len(), 2);
        assert_eq!(imp.set.cases[1].id, "geo-2");
        assert_eq!(imp.unmapped.len(), 1);
        let y = imp.to_yaml("o.yaml").unwrap();
        let set = crate::set::EvalSet::from_yaml("o.yaml", &y).unwrap();
        assert_eq!(set.cases()[0].system(), Some("Answer concisely."));
        let r = crate::response::Response::text_only("It is Paris.");
        assert!(set.cases()[0].checks()[0].score(&r).passed());
        let m = import("s.jsonl", JSONL, "geo", Template::Match).unwrap();
        let y = m.to_yaml("o.yaml").unwrap();
        let set = crate::set::EvalSet::from_yaml("o.yaml", &y).unwrap();
        assert!(!set.cases()[0].checks()[0].score(&r).passed());
        assert!(
            set.cases()[0].checks()[0]
                .score(&crate::response::Response::text_only("Paris."))
                .passed()
        );
    }

    #[test]
    fn bad_lines_name_the_line() {
        let e = import(
            "s.jsonl",
            "{\"input\":\"a\",\"ideal\":\"b\"}\n{oops\n",
            "x",
            Template::Includes,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("s.jsonl:2"), "{e}");
    }
}
