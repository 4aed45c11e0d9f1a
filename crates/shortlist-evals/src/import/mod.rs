//! Importers: promptfoo tests, OpenAI evals JSONL, inspect samples (JSONL/CSV) and BFCL
//! question/answer files, each converted to a `shortlist.evalset.v1` wire set.
//!
//! Nothing is dropped silently: every source item or assertion that has no faithful equivalent
//! is listed in [`Imported::unmapped`], and every approximation in [`Imported::notes`]. A source
//! case left with no check at all is not imported (a case without a check cannot fail) and is
//! listed as unmapped.

pub mod bfcl;
pub mod inspect;
pub mod openai_evals;
pub mod promptfoo;

use serde::Serialize;
use serde_json::Value;

use crate::error::EvalError;
use crate::set::EvalSet;
use crate::wire::{EVALSET_FORMAT, WireCase, WireSet};

/// Something in the source with no equivalent in an eval set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unmapped {
    /// The case (as imported, or the source's position).
    pub case: String,
    /// What was not mapped (e.g. an assertion type).
    pub what: String,
    /// Why.
    pub reason: String,
}

/// The result of an import.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Imported {
    /// The eval set, ready to write as YAML.
    pub set: WireSet,
    /// What could not be mapped.
    pub unmapped: Vec<Unmapped>,
    /// Mappings that are close but not identical, in words.
    pub notes: Vec<String>,
}

impl Imported {
    pub(crate) fn new(name: &str, description: String) -> Self {
        Self {
            set: WireSet {
                format: EVALSET_FORMAT.into(),
                name: name.into(),
                description: Some(description),
                system: None,
                tools: Vec::new(),
                cases: Vec::new(),
            },
            unmapped: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub(crate) fn add_unmapped(&mut self, case: &str, what: &str, reason: impl Into<String>) {
        self.unmapped.push(Unmapped {
            case: case.into(),
            what: what.into(),
            reason: reason.into(),
        });
    }

    pub(crate) fn add_note(&mut self, note: impl Into<String>) {
        let note = note.into();
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    /// Adds a case unless it has no check, in which case it is reported as unmapped.
    pub(crate) fn push_case(&mut self, case: WireCase) {
        if case.checks.is_empty() {
            let id = case.id.clone();
            self.add_unmapped(
                &id,
                "case",
                "no check could be mapped, so the case could not fail; not imported",
            );
        } else {
            self.set.cases.push(case);
        }
    }

    /// Checks the imported set as a loaded set would be checked, and renders it as YAML.
    pub fn to_yaml(&self, file: &str) -> Result<String, EvalError> {
        EvalSet::from_wire(file, &self.set, None)?;
        serde_norway::to_string(&self.set)
            .map_err(|e| EvalError::invalid(file, 0, "", format!("cannot render YAML: {e}")))
    }
}

/// A case id from free text: lowercase letters, digits and `-`, at most 60 characters.
pub(crate) fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
        if out.len() >= 60 {
            break;
        }
    }
    out.trim_end_matches('-').to_owned()
}

/// The longest line a JSON-lines importer parses, in bytes: the limit of Shortlist's other
/// line-oriented readers (`shortlist_measure::lines::MAX_LINE_BYTES`). The text is in memory
/// already, but its parse is not: a 100 MB line of small numbers would become gigabytes of JSON
/// values.
pub const MAX_LINE_BYTES: usize = 32 << 20;

/// One line of a JSON-lines source, refused past [`MAX_LINE_BYTES`] before it is parsed.
pub(crate) fn parse_json_line(file: &str, lineno: usize, line: &str) -> Result<Value, EvalError> {
    if line.len() > MAX_LINE_BYTES {
        return Err(EvalError::invalid(
            file,
            lineno,
            "",
            format!(
                "the line is {} bytes long, over the {MAX_LINE_BYTES} a JSON-lines importer reads",
                line.len()
            ),
        ));
    }
    serde_json::from_str(line)
        .map_err(|e| EvalError::invalid(file, lineno, "", format!("not valid JSON: {e}")))
}

/// The case ids an import has handed out, and for each id asked for, the suffix to try next, so
/// that numbering many equal ids stays linear.
#[derive(Debug, Default)]
pub(crate) struct TakenIds {
    taken: std::collections::BTreeSet<String>,
    next: std::collections::HashMap<String, usize>,
}

/// Makes `id` unique among `taken` by appending `-2`, `-3`, ...
pub(crate) fn unique_id(id: String, taken: &mut TakenIds) -> String {
    let mut candidate = id.clone();
    if taken.taken.contains(&candidate) {
        let n = taken.next.entry(id.clone()).or_insert(2);
        loop {
            candidate = format!("{id}-{n}");
            *n += 1;
            if !taken.taken.contains(&candidate) {
                break;
            }
        }
    }
    taken.taken.insert(candidate.clone());
    candidate
}

/// A category from a source's metadata value: `high_value` → `high-value`; unknown or invalid
/// values give `None`.
pub(crate) fn category_from(v: &str) -> Option<String> {
    let c = v.trim().to_lowercase().replace('_', "-");
    crate::set::Category::parse(&c).ok().map(|c| c.as_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_line_over_the_limit_is_refused_before_parsing() {
        let line = format!("[{}1]", "1,".repeat(MAX_LINE_BYTES / 2));
        for import in [
            |t: &str| openai_evals::import("big.jsonl", t, "x", openai_evals::Template::Match),
            |t: &str| inspect::import_jsonl("big.jsonl", t, "x"),
            |t: &str| bfcl::import("big.jsonl", t, "a.jsonl", None, "x"),
        ] {
            let err = import(&format!("\n{line}\n")).unwrap_err();
            assert!(
                err.to_string()
                    .starts_with("big.jsonl:2: the line is 33554435 bytes long"),
                "{err}"
            );
        }
    }

    #[test]
    fn twenty_thousand_equal_ids_are_numbered_in_linear_time() {
        let line = r#"{"id": "same", "input": "hi", "target": "hello"}"#;
        let text = format!("{line}\n").repeat(20_000);
        let started = std::time::Instant::now();
        let imported = inspect::import_jsonl("same.jsonl", &text, "x").unwrap();
        let took = started.elapsed();
        let ids: std::collections::BTreeSet<&str> =
            imported.set.cases.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids.len(), 20_000);
        assert!(ids.contains("same-20000"));
        assert!(took < std::time::Duration::from_secs(5), "took {took:?}");
    }

    #[test]
    fn slugs_and_unique_ids() {
        assert_eq!(
            slug("Refund after 30 days (high value)"),
            "refund-after-30-days-high-value"
        );
        let mut taken = TakenIds::default();
        assert_eq!(unique_id("a".into(), &mut taken), "a");
        assert_eq!(unique_id("a".into(), &mut taken), "a-2");
        assert_eq!(category_from("high_value").as_deref(), Some("high-value"));
        assert_eq!(category_from("Not valid!"), None);
    }
}
