//! What changed from one eval set version to another, case by case.
//!
//! Cases are matched by id. A case in both versions is *changed* when anything that enters the
//! set's canonical form differs (so exactly when it would move the version's hash): its
//! category, its effective system prompt, its input, a tool offered to it, a check (matched by
//! its name within the case), its weight or its tags. Each difference is an [`Edit`] of one
//! field, and identical edits of several cases are one edit naming them all — a system prompt
//! changed for the whole set is one edit over every case, not one per case. A set whose cases
//! are the same in another order has another hash too; [`SetDiff::reordered`] says so.
//!
//! ```
//! use shortlist_evals::{EvalSet, diff::SetDiff};
//!
//! let v1 = EvalSet::from_yaml("v1.yaml", "format: shortlist.evalset.v1\nname: s\ncases:\n  \
//!     - {id: a, category: ordinary, input: Hi, checks: [{type: contains, value: hello}]}\n  \
//!     - {id: b, category: ordinary, input: Bye, checks: [{type: contains, value: bye}]}\n").unwrap();
//! let v2 = EvalSet::from_yaml("v2.yaml", "format: shortlist.evalset.v1\nname: s\ncases:\n  \
//!     - {id: a, category: ordinary, input: Hi, checks: [{type: contains, value: Hello}]}\n  \
//!     - {id: c, category: refusal, input: Help me hack, checks: [{type: refusal, expect: refuse}]}\n").unwrap();
//! let d = SetDiff::between(&v1, &v2);
//! assert_eq!(d.added[0].id, "c");
//! assert_eq!(d.removed[0].id, "b");
//! assert_eq!(d.edits[0].field, "checks.contains");
//! assert_eq!(d.edits[0].cases, ["a"]);
//! ```

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use serde_json::Value;

use crate::set::{Case, EvalSet, write_canonical};
use crate::wire::WireInput;

/// A case named in a difference: its id and category (in the version it is in).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CaseRef {
    pub id: String,
    pub category: String,
}

/// One field's change, made to every case in `cases` alike.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Edit {
    /// `category`, `system`, `input`, `weight`, `tags`, `tools.NAME` or `checks.NAME`.
    pub field: String,
    /// The value before, as text (`None`: the field was not there — a check or tool added, no
    /// system prompt). Texts as they are; a check or a tool as its canonical JSON; a chat one
    /// line per message (`role: content`).
    pub before: Option<String>,
    /// The value after (`None`: removed).
    pub after: Option<String>,
    /// The cases it was made to, in the newer version's order.
    pub cases: Vec<String>,
}

/// What changed from one version (`from`) to another (`to`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SetDiff {
    /// Cases only in `to`, in its order.
    pub added: Vec<CaseRef>,
    /// Cases only in `from`, in its order.
    pub removed: Vec<CaseRef>,
    /// Cases in both that differ, in `to`'s order (with `to`'s category).
    pub changed: Vec<CaseRef>,
    /// The differences of the changed cases, identical ones made to several cases merged, in
    /// the order of their first case in `to`.
    pub edits: Vec<Edit>,
    /// Cases in both, the same.
    pub same: usize,
    /// Whether the cases both versions hold come in another order.
    pub reordered: bool,
}

impl SetDiff {
    /// The differences from `from` to `to`.
    pub fn between(from: &EvalSet, to: &EvalSet) -> SetDiff {
        let before: HashMap<&str, &Case> = from.cases().iter().map(|c| (c.id(), c)).collect();
        let after: HashMap<&str, &Case> = to.cases().iter().map(|c| (c.id(), c)).collect();
        let mut diff = SetDiff {
            added: Vec::new(),
            removed: from
                .cases()
                .iter()
                .filter(|c| !after.contains_key(c.id()))
                .map(case_ref)
                .collect(),
            changed: Vec::new(),
            edits: Vec::new(),
            same: 0,
            reordered: false,
        };
        // Edits keyed by (field, before, after), in order of first appearance.
        let mut index: HashMap<(String, Option<String>, Option<String>), usize> = HashMap::new();
        for case in to.cases() {
            let Some(old) = before.get(case.id()) else {
                diff.added.push(case_ref(case));
                continue;
            };
            let fields = field_changes(old, case);
            if fields.is_empty() {
                diff.same += 1;
                continue;
            }
            diff.changed.push(case_ref(case));
            for (field, b, a) in fields {
                let key = (field, b, a);
                match index.get(&key) {
                    Some(&i) => diff.edits[i].cases.push(case.id().to_owned()),
                    None => {
                        index.insert(key.clone(), diff.edits.len());
                        diff.edits.push(Edit {
                            field: key.0,
                            before: key.1,
                            after: key.2,
                            cases: vec![case.id().to_owned()],
                        });
                    }
                }
            }
        }
        let order = |set: &EvalSet, other: &HashMap<&str, &Case>| -> Vec<String> {
            set.cases()
                .iter()
                .filter(|c| other.contains_key(c.id()))
                .map(|c| c.id().to_owned())
                .collect()
        };
        diff.reordered = order(from, &after) != order(to, &before);
        diff
    }

    /// Whether nothing a score depends on changed (the versions' hashes are equal).
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && !self.reordered
    }
}

fn case_ref(c: &Case) -> CaseRef {
    CaseRef {
        id: c.id().to_owned(),
        category: c.category().as_string(),
    }
}

/// A field's name with its value before and after (`None`: absent).
type FieldChange = (String, Option<String>, Option<String>);

/// `(field, before, after)` for each field of the two cases' canonical forms that differs, in
/// a fixed order: category, system, input, tools, checks, weight, tags.
fn field_changes(old: &Case, new: &Case) -> Vec<FieldChange> {
    let mut out = Vec::new();
    let mut push = |field: String, b: Option<String>, a: Option<String>| {
        if b != a {
            out.push((field, b, a));
        }
    };
    push(
        "category".into(),
        Some(old.category().as_string()),
        Some(new.category().as_string()),
    );
    push(
        "system".into(),
        old.system().map(str::to_owned),
        new.system().map(str::to_owned),
    );
    push(
        "input".into(),
        Some(input_text(&old.canonical().input)),
        Some(input_text(&new.canonical().input)),
    );
    for (name, b, a) in keyed(tools(old), tools(new)) {
        push(format!("tools.{name}"), b, a);
    }
    for (name, b, a) in keyed(checks(old), checks(new)) {
        push(format!("checks.{name}"), b, a);
    }
    push(
        "weight".into(),
        Some(old.weight().to_string()),
        Some(new.weight().to_string()),
    );
    push(
        "tags".into(),
        Some(old.tags().join(", ")).filter(|t| !t.is_empty()),
        Some(new.tags().join(", ")).filter(|t| !t.is_empty()),
    );
    out
}

/// A case's input as text: the prompt, or one line per message.
fn input_text(input: &WireInput) -> String {
    match input {
        WireInput::Prompt(p) => p.clone(),
        WireInput::Messages(ms) => ms
            .iter()
            .map(|m| format!("{}: {}", m.role, m.content))
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

fn canonical_text<T: Serialize>(v: &T) -> String {
    let mut out = String::new();
    write_canonical(&serde_json::to_value(v).unwrap_or(Value::Null), &mut out);
    out
}

/// The case's tools by name, each as its canonical JSON.
fn tools(c: &Case) -> Vec<(String, String)> {
    c.tools()
        .iter()
        .zip(&c.canonical().tools)
        .map(|(t, wire)| (t.name().to_owned(), canonical_text(wire)))
        .collect()
}

/// The case's checks by name, each as its canonical JSON.
fn checks(c: &Case) -> Vec<(String, String)> {
    c.checks()
        .iter()
        .zip(&c.canonical().checks)
        .map(|(k, wire)| (k.name().to_owned(), canonical_text(wire)))
        .collect()
}

/// Two lists of named values joined by name: the names of `old` in order, then those only in
/// `new`.
fn keyed(old: Vec<(String, String)>, new: Vec<(String, String)>) -> Vec<FieldChange> {
    let mut names: Vec<String> = old.iter().map(|(n, _)| n.clone()).collect();
    names.extend(
        new.iter()
            .map(|(n, _)| n.clone())
            .filter(|n| !old.iter().any(|(o, _)| o == n)),
    );
    let old: BTreeMap<String, String> = old.into_iter().collect();
    let mut new: BTreeMap<String, String> = new.into_iter().collect();
    names
        .into_iter()
        .map(|n| {
            let b = old.get(&n).cloned();
            let a = new.remove(&n);
            (n, b, a)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(cases: &[(&str, &str, &str, &str)], system: Option<&str>) -> EvalSet {
        let mut yaml = String::from("format: shortlist.evalset.v1\nname: s\n");
        if let Some(s) = system {
            yaml.push_str(&format!("system: {s:?}\n"));
        }
        yaml.push_str("cases:\n");
        for (id, category, input, needle) in cases {
            yaml.push_str(&format!(
                "  - id: {id}\n    category: {category}\n    input: {input:?}\n    checks: [{{type: contains, value: {needle:?}}}]\n"
            ));
        }
        EvalSet::from_yaml("t.yaml", &yaml).unwrap()
    }

    #[test]
    fn a_set_wide_system_prompt_change_is_one_edit_over_every_case() {
        let cases = [
            ("a", "ordinary", "Hi", "hello"),
            ("b", "refusal", "Go", "no"),
        ];
        let d = SetDiff::between(
            &set(&cases, Some("Be brief.")),
            &set(&cases, Some("Be kind.")),
        );
        assert_eq!(d.edits.len(), 1);
        assert_eq!(d.edits[0].field, "system");
        assert_eq!(d.edits[0].before.as_deref(), Some("Be brief."));
        assert_eq!(d.edits[0].after.as_deref(), Some("Be kind."));
        assert_eq!(d.edits[0].cases, ["a", "b"]);
        assert_eq!((d.changed.len(), d.same), (2, 0));
        assert!(!d.reordered);
    }

    #[test]
    fn each_field_is_named_and_a_check_added_has_no_before() {
        let v1 = EvalSet::from_yaml(
            "v1",
            "format: shortlist.evalset.v1\nname: s\ncases:\n  - id: a\n    category: ordinary\n    input: Hi\n    weight: 2\n    tags: [x]\n    checks: [{type: contains, value: hello}]\n",
        )
        .unwrap();
        let v2 = EvalSet::from_yaml(
            "v2",
            "format: shortlist.evalset.v1\nname: s\ncases:\n  - id: a\n    category: high-value\n    input: [{role: user, content: Hi}, {role: assistant, content: Hey}, {role: user, content: So?}]\n    checks: [{type: contains, value: hello}, {type: refusal, expect: answer}]\n",
        )
        .unwrap();
        let d = SetDiff::between(&v1, &v2);
        let fields: Vec<_> = d.edits.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            ["category", "input", "checks.refusal", "weight", "tags"]
        );
        assert_eq!(
            d.edits[1].after.as_deref(),
            Some("user: Hi\nassistant: Hey\nuser: So?")
        );
        assert_eq!(d.edits[2].before, None);
        assert_eq!(
            d.edits[2].after.as_deref(),
            Some(r#"{"expect":"answer","type":"refusal"}"#)
        );
        assert_eq!(d.edits[3].before.as_deref(), Some("2"));
        assert_eq!(d.edits[3].after.as_deref(), Some("1"));
        assert_eq!(d.edits[4].after, None);
    }

    #[test]
    fn the_same_cases_in_another_order_are_reordered_not_changed() {
        let a = ("a", "ordinary", "Hi", "hello");
        let b = ("b", "ordinary", "Go", "no");
        let d = SetDiff::between(&set(&[a, b], None), &set(&[b, a], None));
        assert!(d.reordered);
        assert!(d.changed.is_empty() && d.added.is_empty() && d.removed.is_empty());
        assert_eq!(d.same, 2);
        assert!(!d.is_empty());
    }

    fn arb_cases() -> impl Strategy<Value = Vec<(usize, usize, usize)>> {
        // (id, input, needle) picked from small pools, ids unique.
        proptest::collection::btree_map(0usize..12, (0usize..3, 0usize..3), 0..10)
            .prop_map(|m| m.into_iter().map(|(id, (i, n))| (id, i, n)).collect())
            .prop_shuffle()
    }

    fn build(cases: &[(usize, usize, usize)], system: usize) -> EvalSet {
        let ids: Vec<String> = cases.iter().map(|c| format!("c{}", c.0)).collect();
        let inputs = ["Hi", "Where is my invoice?", "Cancel it"];
        let needles = ["hello", "invoice", "cancel"];
        let rows: Vec<(&str, &str, &str, &str)> = cases
            .iter()
            .zip(&ids)
            .map(|(c, id)| (id.as_str(), "ordinary", inputs[c.1], needles[c.2]))
            .collect();
        if rows.is_empty() {
            // A set needs a case: one that both sides share.
            return set(
                &[("z", "ordinary", "Hi", "hello")],
                [None, Some("A")][system],
            );
        }
        set(&rows, [None, Some("A")][system])
    }

    proptest! {
        #[test]
        fn a_diff_partitions_both_versions_and_mirrors_its_reverse(
            a in arb_cases(), b in arb_cases(), sa in 0usize..2, sb in 0usize..2,
        ) {
            let (x, y) = (build(&a, sa), build(&b, sb));
            let d = SetDiff::between(&x, &y);
            let r = SetDiff::between(&y, &x);
            prop_assert_eq!(d.added.len() + d.changed.len() + d.same, y.cases().len());
            prop_assert_eq!(d.removed.len() + d.changed.len() + d.same, x.cases().len());
            prop_assert_eq!(&d.added, &r.removed);
            prop_assert_eq!(&d.removed, &r.added);
            prop_assert_eq!(d.same, r.same);
            prop_assert_eq!(d.reordered, r.reordered);
            let mut ids: Vec<_> = d.changed.iter().map(|c| &c.id).collect();
            let mut back: Vec<_> = r.changed.iter().map(|c| &c.id).collect();
            ids.sort();
            back.sort();
            prop_assert_eq!(ids, back);
            // Every changed case has an edit; every edit names changed cases only.
            for c in &d.changed {
                prop_assert!(d.edits.iter().any(|e| e.cases.contains(&c.id)));
            }
            for e in &d.edits {
                prop_assert!(e.before != e.after);
                for id in &e.cases {
                    prop_assert!(d.changed.iter().any(|c| &c.id == id));
                }
            }
            // Empty exactly when the hashes agree.
            prop_assert_eq!(d.is_empty(), x.sha256() == y.sha256());
            prop_assert!(SetDiff::between(&x, &x).is_empty());
        }
    }
}
