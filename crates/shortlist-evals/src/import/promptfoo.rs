//! promptfoo test files: a YAML list of tests, or a config with `tests:` (and optionally
//! `prompts:` and `defaultTest:`). Each test has `vars`, `assert`, `description`, `metadata`.
//!
//! The prompt is the first inline prompt template with `{{var}}` filled in from the test's vars;
//! without an inline template (or with a `file://` one, which this pure crate cannot read), a
//! single var, or the var named `prompt`, `question`, `input`, `query` or `message`, is the prompt.
//!
//! Assertion mapping (`not-` negates the text checks):
//! `equals` → equals; `contains`/`icontains` → contains; `contains-any`/`contains-all` and their
//! `i` forms → contains with mode any/all; `starts-with` → starts-with; `regex` → regex;
//! `is-json` → json (strict, with the schema given as value); `contains-json` → json (auto: whole
//! output or first fenced block — stricter than promptfoo, which searches anywhere, and noted);
//! `is-refusal` / `not-is-refusal` → refusal refuse / answer; an `assert-set` without a threshold
//! is flattened (all must pass), one with a threshold below 1 is unmapped. Everything else (`llm-rubric`,
//! `javascript`, `python`, `similar`, `latency`, `cost`, `levenshtein`, ...) is reported as
//! unmapped with the reason.

use serde_json::Value;

use super::{Imported, category_from, slug, unique_id};
use crate::error::EvalError;
use crate::wire::{OneOrMany, WireCase, WireCheck, WireInput};

/// Imports promptfoo tests from YAML text.
pub fn import(file: &str, text: &str, name: &str) -> Result<Imported, EvalError> {
    let doc: Value = crate::set::from_yaml_text(file, text)?;
    let (tests, template, default_asserts) = match &doc {
        Value::Array(tests) => (tests.clone(), None, Vec::new()),
        Value::Object(cfg) => {
            let tests = match cfg.get("tests") {
                Some(Value::Array(t)) => t.clone(),
                Some(Value::String(s)) => {
                    return Err(EvalError::invalid(
                        file,
                        0,
                        "tests",
                        format!("tests are in another file ({s}); import that file instead"),
                    ));
                }
                _ => {
                    return Err(EvalError::invalid(
                        file,
                        0,
                        "tests",
                        "no `tests` list found",
                    ));
                }
            };
            let template = match cfg.get("prompts") {
                Some(Value::Array(ps)) => ps.first().and_then(prompt_text),
                Some(Value::String(s)) => Some(s.clone()),
                _ => None,
            };
            let defaults = cfg
                .get("defaultTest")
                .and_then(|d| d.get("assert"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            (tests, template, defaults)
        }
        _ => {
            return Err(EvalError::invalid(
                file,
                1,
                "",
                "expected a list of tests or a promptfoo config",
            ));
        }
    };
    let mut imp = Imported::new(name, format!("Imported from promptfoo tests in {file}."));
    if template
        .as_deref()
        .is_some_and(|t| t.starts_with("file://"))
    {
        imp.add_note("prompt templates given as file:// references are not read; the vars are used as the prompt");
    }
    let template = template.filter(|t| !t.starts_with("file://"));
    let mut taken = super::TakenIds::default();
    for (i, t) in tests.iter().enumerate() {
        let field = format!("tests[{i}]");
        let obj = t
            .as_object()
            .ok_or_else(|| EvalError::invalid(file, 0, &field, "a test must be a mapping"))?;
        let description = obj.get("description").and_then(Value::as_str).unwrap_or("");
        let base = if description.is_empty() {
            format!("promptfoo-{}", i + 1)
        } else {
            slug(description)
        };
        let id = unique_id(
            if base.is_empty() {
                format!("promptfoo-{}", i + 1)
            } else {
                base
            },
            &mut taken,
        );
        let vars = obj
            .get("vars")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let prompt = match &template {
            Some(tpl) => render(tpl, &vars),
            None => match pick_prompt_var(&vars) {
                Some(p) => p,
                None => {
                    imp.add_unmapped(&id, "vars", "no prompt template and no single prompt-like var; give the config's `prompts`");
                    continue;
                }
            },
        };
        let metadata = obj.get("metadata").and_then(Value::as_object);
        let category = metadata
            .and_then(|m| m.get("category").or_else(|| m.get("class")))
            .and_then(Value::as_str)
            .and_then(category_from)
            .unwrap_or_else(|| "ordinary".into());
        let asserts: Vec<Value> = default_asserts
            .iter()
            .cloned()
            .chain(
                obj.get("assert")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
            )
            .collect();
        let mut checks = Vec::new();
        let mut flat = Vec::new();
        for a in &asserts {
            flatten_sets(a, &mut flat, &mut |what, why| {
                imp.add_unmapped(&id, what, why)
            });
        }
        for a in &flat {
            match map_assertion(a) {
                Ok((check, note)) => {
                    checks.push(check);
                    if let Some(n) = note {
                        imp.add_note(n);
                    }
                }
                Err((what, why)) => imp.add_unmapped(&id, &what, why),
            }
        }
        let tags = metadata
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| *k != "category" && *k != "class")
                    .map(|(k, v)| match v {
                        Value::String(s) => format!("{k}:{s}"),
                        other => format!("{k}:{other}"),
                    })
                    .collect()
            })
            .unwrap_or_default();
        imp.push_case(WireCase {
            id,
            category,
            input: WireInput::Prompt(prompt),
            system: None,
            tools: Vec::new(),
            checks,
            weight: None,
            tags,
        });
    }
    Ok(imp)
}

/// An `assert-set` without a threshold (or with threshold 1) means "all of these": its members
/// are taken as ordinary assertions. A set with a lower threshold (k of n) has no equivalent.
fn flatten_sets(a: &Value, out: &mut Vec<Value>, unmapped: &mut dyn FnMut(&str, &str)) {
    if a.get("type").and_then(Value::as_str) != Some("assert-set") {
        out.push(a.clone());
        return;
    }
    let threshold = a.get("threshold").and_then(Value::as_f64).unwrap_or(1.0);
    if threshold < 1.0 {
        unmapped(
            "assert type assert-set",
            "a threshold below 1 (k of n assertions) has no equivalent: every check must pass",
        );
        return;
    }
    for inner in a
        .get("assert")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        flatten_sets(inner, out, unmapped);
    }
}

fn prompt_text(p: &Value) -> Option<String> {
    match p {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o
            .get("raw")
            .or_else(|| o.get("prompt"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        _ => None,
    }
}

fn var_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Fills `{{ name }}` placeholders.
fn render(tpl: &str, vars: &serde_json::Map<String, Value>) -> String {
    let mut out = tpl.to_owned();
    for (k, v) in vars {
        for pat in [format!("{{{{{k}}}}}"), format!("{{{{ {k} }}}}")] {
            out = out.replace(&pat, &var_text(v));
        }
    }
    out
}

fn pick_prompt_var(vars: &serde_json::Map<String, Value>) -> Option<String> {
    if vars.len() == 1 {
        return vars.values().next().map(var_text);
    }
    ["prompt", "question", "input", "query", "message"]
        .iter()
        .find_map(|k| vars.get(*k))
        .map(var_text)
}

type Mapped = Result<(WireCheck, Option<String>), (String, String)>;

fn map_assertion(a: &Value) -> Mapped {
    let ty = a
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let (negate, base) = match ty.strip_prefix("not-") {
        Some(b) => (true, b.to_owned()),
        None => (false, ty.clone()),
    };
    let value = a.get("value");
    let unmapped = |why: &str| Err((format!("assert type {ty}"), why.to_owned()));
    let string_value = || value.and_then(Value::as_str).map(str::to_owned);
    let list_value = || -> Option<Vec<String>> {
        match value? {
            Value::Array(items) => items
                .iter()
                .map(|x| x.as_str().map(str::to_owned))
                .collect(),
            Value::String(s) => Some(vec![s.clone()]),
            _ => None,
        }
    };
    let mut note = None;
    if a.get("weight")
        .and_then(Value::as_f64)
        .is_some_and(|w| w != 1.0)
    {
        note = Some(
            "per-assertion weights have no equivalent (every check must pass); they were ignored"
                .to_owned(),
        );
    }
    let text = |c: WireCheck| Ok((c, note.clone()));
    match base.as_str() {
        "equals" => match string_value() {
            Some(v) => text(WireCheck::Equals {
                name: None,
                value: v,
                ignore_case: false,
                negate,
            }),
            None => unmapped("equals with a non-string value (JSON equality) has no equivalent"),
        },
        "contains" | "icontains" => match string_value() {
            Some(v) => text(WireCheck::Contains {
                name: None,
                value: OneOrMany::One(v),
                mode: None,
                ignore_case: base == "icontains",
                negate,
            }),
            None => unmapped("value must be a string"),
        },
        "contains-any" | "icontains-any" | "contains-all" | "icontains-all" => match list_value() {
            Some(v) if !v.is_empty() => text(WireCheck::Contains {
                name: None,
                value: OneOrMany::Many(v),
                mode: Some(if base.ends_with("any") { "any" } else { "all" }.into()),
                ignore_case: base.starts_with('i'),
                negate,
            }),
            _ => unmapped("value must be a list of strings"),
        },
        "starts-with" => match string_value() {
            Some(v) => text(WireCheck::StartsWith {
                name: None,
                value: v,
                ignore_case: false,
                negate,
            }),
            None => unmapped("value must be a string"),
        },
        "regex" => match string_value() {
            Some(v) => text(WireCheck::Regex {
                name: None,
                pattern: v,
                ignore_case: false,
                negate,
            }),
            None => unmapped("value must be a string"),
        },
        "is-json" | "contains-json" if !negate => {
            let schema = value.filter(|v| v.is_object()).cloned();
            if value.is_some() && schema.is_none() {
                return unmapped("schema given as a file reference or non-object is not read");
            }
            let source = if base == "is-json" {
                Some("strict".to_owned())
            } else {
                None
            };
            if base == "contains-json" {
                note = Some(
                    "contains-json became a json check that reads the whole output or its first fenced block; \
                     promptfoo also finds JSON inside prose"
                        .into(),
                );
            }
            Ok((
                WireCheck::Json {
                    name: None,
                    schema,
                    source,
                },
                note,
            ))
        }
        "is-refusal" => Ok((
            WireCheck::Refusal {
                name: None,
                expect: if negate { "answer" } else { "refuse" }.into(),
                patterns: Vec::new(),
            },
            note,
        )),
        "llm-rubric" | "g-eval" | "model-graded-closedqa" | "factuality" => unmapped(
            "needs a judge candidate; add a `judge` check naming one (its verdicts gate only after calibration)",
        ),
        "" => Err((
            "assert without type".into(),
            "every assertion needs a type".into(),
        )),
        _ => unmapped("no equivalent scorer in Shortlist"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_and_reports() {
        let yaml = r#"
prompts: ["Answer the customer: {{question}}"]
defaultTest:
  assert:
    - type: not-is-refusal
tests:
  - description: refund after 30 days (high value)
    vars: {question: "Can I get a refund after 30 days?"}
    metadata: {class: high_value, lang: en}
    assert:
      - {type: icontains, value: "30 days"}
      - {type: llm-rubric, value: "Does not promise a refund outside policy"}
      - {type: latency, threshold: 2000}
  - vars: {question: "Plans?"}
    assert:
      - {type: contains-any, value: [Starter, Team]}
      - {type: not-contains, value: "Enterprise"}
      - {type: is-json, value: {type: object}}
  - vars: {question: "x"}
    assert:
      - {type: javascript, value: "output.length > 3"}
"#;
        let imp = import("pf.yaml", yaml, "pf").unwrap();
        assert_eq!(imp.set.cases.len(), 3);
        let c0 = &imp.set.cases[0];
        assert_eq!(c0.id, "refund-after-30-days-high-value");
        assert_eq!(c0.category, "high-value");
        assert_eq!(
            c0.input,
            WireInput::Prompt("Answer the customer: Can I get a refund after 30 days?".into())
        );
        assert_eq!(c0.checks.len(), 2); // default not-is-refusal + icontains
        let what: Vec<&str> = imp.unmapped.iter().map(|u| u.what.as_str()).collect();
        assert_eq!(
            what,
            vec![
                "assert type llm-rubric",
                "assert type latency",
                "assert type javascript"
            ]
        );
        // The third case keeps the default refusal check, so it is still imported.
        assert_eq!(imp.set.cases[2].checks.len(), 1);
        let yaml_out = imp.to_yaml("out.yaml").unwrap();
        assert!(crate::set::EvalSet::from_yaml("out.yaml", &yaml_out).is_ok());
    }

    #[test]
    fn assert_sets_flatten_unless_k_of_n() {
        let yaml = r#"
- vars: {q: "Plans?"}
  assert:
    - type: assert-set
      assert:
        - {type: contains, value: Team}
        - {type: contains, value: Business}
    - type: assert-set
      threshold: 0.5
      assert:
        - {type: contains, value: Free}
        - {type: contains, value: Enterprise}
"#;
        let imp = import("pf.yaml", yaml, "pf").unwrap();
        assert_eq!(imp.set.cases[0].checks.len(), 2);
        assert_eq!(imp.unmapped.len(), 1);
        assert_eq!(imp.unmapped[0].what, "assert type assert-set");
    }

    #[test]
    fn case_with_nothing_mappable_is_reported_not_dropped() {
        let yaml = "- vars: {q: hi}\n  assert:\n    - {type: python, value: x}\n";
        let imp = import("pf.yaml", yaml, "pf").unwrap();
        assert!(imp.set.cases.is_empty());
        assert_eq!(imp.unmapped.len(), 2);
        assert_eq!(imp.unmapped[1].what, "case");
    }
}
