//! inspect_ai samples, as JSONL or CSV: `input` (text or chat messages), `target` (text or list),
//! `choices`, `id`, `metadata`.
//!
//! Without `choices`, the check is inspect's `includes`: the output contains any target,
//! case-insensitively. With `choices`, the prompt lists them as `A) ...`, `B) ...` and asks for the
//! letter; the target (a letter, or the text of a choice) becomes a regex check that the answer
//! opens with that letter (optionally after `ANSWER:`). `metadata.category` (or `class`) sets the
//! category; other metadata become tags. In CSV, `choices` is a JSON list or `|`-separated text,
//! `metadata` a JSON object, and any other column is metadata.

use serde_json::{Map, Value};

use super::{Imported, category_from};
use crate::error::EvalError;
use crate::wire::{OneOrMany, WireCase, WireCheck, WireInput};

/// Imports JSON Lines samples.
pub fn import_jsonl(file: &str, text: &str, name: &str) -> Result<Imported, EvalError> {
    let mut imp = Imported::new(name, format!("Imported from inspect samples in {file}."));
    let mut taken = super::TakenIds::default();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v = super::parse_json_line(file, i + 1, line)?;
        let obj = v
            .as_object()
            .ok_or_else(|| EvalError::invalid(file, i + 1, "", "a sample must be an object"))?;
        sample(&mut imp, &mut taken, file, i + 1, obj)?;
    }
    Ok(imp)
}

/// Imports CSV samples (header row required).
pub fn import_csv(file: &str, text: &str, name: &str) -> Result<Imported, EvalError> {
    let mut imp = Imported::new(name, format!("Imported from inspect samples in {file}."));
    let mut taken = super::TakenIds::default();
    let mut rdr = csv::Reader::from_reader(text.as_bytes());
    let headers = rdr
        .headers()
        .map_err(|e| EvalError::invalid(file, 1, "", format!("bad CSV header: {e}")))?
        .clone();
    for rec in rdr.records() {
        let rec = rec.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line() as usize);
            EvalError::invalid(file, line, "", format!("bad CSV row: {e}"))
        })?;
        let line = rec.position().map_or(0, |p| p.line() as usize);
        let mut obj = Map::new();
        let mut meta = Map::new();
        for (h, val) in headers.iter().zip(rec.iter()) {
            match h {
                "input" | "target" | "id" => {
                    obj.insert(h.into(), Value::String(val.into()));
                }
                "choices" => {
                    let list = if val.trim_start().starts_with('[') {
                        serde_json::from_str(val).map_err(|e| {
                            EvalError::invalid(
                                file,
                                line,
                                "choices",
                                format!("not a JSON list: {e}"),
                            )
                        })?
                    } else {
                        Value::Array(
                            val.split('|')
                                .map(|s| Value::String(s.trim().into()))
                                .collect(),
                        )
                    };
                    if !val.trim().is_empty() {
                        obj.insert("choices".into(), list);
                    }
                }
                "metadata" if !val.trim().is_empty() => {
                    let m: Map<String, Value> = serde_json::from_str(val).map_err(|e| {
                        EvalError::invalid(
                            file,
                            line,
                            "metadata",
                            format!("not a JSON object: {e}"),
                        )
                    })?;
                    meta.extend(m);
                }
                _ if !val.is_empty() => {
                    meta.insert(h.into(), Value::String(val.into()));
                }
                _ => {}
            }
        }
        obj.insert("metadata".into(), Value::Object(meta));
        sample(&mut imp, &mut taken, file, line, &obj)?;
    }
    Ok(imp)
}

fn sample(
    imp: &mut Imported,
    taken: &mut super::TakenIds,
    file: &str,
    line: usize,
    obj: &Map<String, Value>,
) -> Result<(), EvalError> {
    let raw_id = match obj.get("id") {
        Some(Value::String(s)) if !s.trim().is_empty() => super::slug(s),
        Some(Value::Number(n)) => format!("{}-{n}", imp.set.name),
        _ => format!("{}-{line}", imp.set.name),
    };
    let id = super::unique_id(raw_id, taken);
    let mut input = super::openai_evals::parse_input(obj.get("input"))
        .map_err(|m| EvalError::invalid(file, line, "input", m))?;
    let targets: Vec<String> = match obj.get("target") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    };
    let targets: Vec<String> = targets
        .into_iter()
        .filter(|t| !t.trim().is_empty())
        .collect();
    if targets.is_empty() {
        imp.add_unmapped(
            &id,
            "sample without target",
            "nothing to check against; not imported",
        );
        return Ok(());
    }
    let choices: Option<Vec<String>> = obj.get("choices").and_then(Value::as_array).map(|a| {
        a.iter()
            .map(|x| x.as_str().unwrap_or_default().to_owned())
            .collect()
    });
    let check = match choices {
        Some(choices) if !choices.is_empty() => {
            let letters: Vec<char> = ('A'..='Z').take(choices.len()).collect();
            let mut wanted = Vec::new();
            for t in &targets {
                let t = t.trim();
                let letter = if t.len() == 1
                    && letters.contains(&t.chars().next().unwrap_or(' ').to_ascii_uppercase())
                {
                    t.chars().next().map(|c| c.to_ascii_uppercase())
                } else {
                    choices.iter().position(|c| c == t).map(|i| letters[i])
                };
                match letter {
                    Some(l) => wanted.push(l),
                    None => {
                        return Err(EvalError::invalid(
                            file,
                            line,
                            "target",
                            format!(
                                "target {t:?} is neither a choice letter nor one of the choices"
                            ),
                        ));
                    }
                }
            }
            let listing: Vec<String> = choices
                .iter()
                .zip(&letters)
                .map(|(c, l)| format!("{l}) {c}"))
                .collect();
            let suffix = format!(
                "\n\n{}\n\nAnswer with the letter of the correct choice.",
                listing.join("\n")
            );
            match &mut input {
                WireInput::Prompt(p) => p.push_str(&suffix),
                WireInput::Messages(ms) => {
                    if let Some(last) = ms.last_mut() {
                        last.content.push_str(&suffix);
                    }
                }
            }
            let alts: String = wanted.iter().collect();
            WireCheck::Regex {
                name: None,
                pattern: format!(r"\A\s*(?:ANSWER:\s*)?\(?[{alts}]\b"),
                ignore_case: false,
                negate: false,
            }
        }
        _ => WireCheck::Contains {
            name: None,
            value: OneOrMany::Many(targets),
            mode: Some("any".into()),
            ignore_case: true,
            negate: false,
        },
    };
    let meta = obj.get("metadata").and_then(Value::as_object);
    let category = meta
        .and_then(|m| m.get("category").or_else(|| m.get("class")))
        .and_then(Value::as_str)
        .and_then(category_from)
        .unwrap_or_else(|| "ordinary".into());
    let tags = meta
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
        input,
        system: None,
        tools: Vec::new(),
        checks: vec![check],
        weight: None,
        tags,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::Response;
    use crate::set::EvalSet;

    #[test]
    fn jsonl_with_and_without_choices() {
        let jsonl = r#"{"id":"refund-de-01","input":[{"role":"user","content":"Kann ich nach 30 Tagen erstatten?"}],"target":"Nein","metadata":{"class":"high_value","lang":"de"}}
{"id":"mcq-1","input":"Which port does HTTPS use?","choices":["80","443","22"],"target":"B"}
{"id":"mcq-2","input":"Which port does SSH use?","choices":["80","443","22"],"target":"22"}
"#;
        let imp = import_jsonl("s.jsonl", jsonl, "ins").unwrap();
        let set = EvalSet::from_yaml("o.yaml", &imp.to_yaml("o.yaml").unwrap()).unwrap();
        assert_eq!(set.cases()[0].category().as_string(), "high-value");
        assert_eq!(set.cases()[0].tags(), ["lang:de"]);
        let score = |i: usize, t: &str| {
            set.cases()[i].checks()[0]
                .score(&Response::text_only(t))
                .passed()
        };
        assert!(score(0, "nein, leider nicht"));
        assert!(score(1, "B) 443"));
        assert!(score(1, "ANSWER: B"));
        assert!(!score(1, "A"));
        assert!(score(2, "C"));
        assert!(set.cases()[1].messages()[0].content.contains("B) 443"));
    }

    #[test]
    fn csv_samples() {
        let csv = "id,input,target,choices,category\nq1,What is 2+2?,4,,ordinary\nq2,Pick the prime,B,4|5|6,\n";
        let imp = import_csv("s.csv", csv, "ins").unwrap();
        assert_eq!(imp.set.cases.len(), 2);
        let set = EvalSet::from_yaml("o.yaml", &imp.to_yaml("o.yaml").unwrap()).unwrap();
        assert!(
            set.cases()[1].checks()[0]
                .score(&Response::text_only("B"))
                .passed()
        );
        let bad = "id,input,target,choices\nq1,Pick,Z,4|5\n";
        let e = import_csv("s.csv", bad, "ins").unwrap_err().to_string();
        assert!(e.starts_with("s.csv:2: field `target`"), "{e}");
    }
}
