//! What changed from one version of a study to another: each criterion that differs, by its
//! place in the study file (`slo.ttft_ms`, `candidate[gemma3].source`,
//! `disqualifier[any high-value case failed].value`), with its value before and after.
//!
//! The comparison covers what the lock hash covers — the study's canonical JSON — except the
//! version number and the link to the version replaced, which always differ. Candidates are
//! matched by name and disqualifiers by their name (an unnamed one by its metric), so a criterion
//! added, removed or changed reads as such wherever it stands in the list; a whole table or
//! list entry present on one side only is one change.
//!
//! ```
//! use shortlist_study::diff::changes;
//! use shortlist_study::study::Study;
//!
//! let v1 = r#"
//! format = "shortlist.study.v1"
//! name = "support"
//! question = "Which model answers support chats?"
//! evalset = { path = "set.yaml", sha256 = "0000000000000000000000000000000000000000000000000000000000000000" }
//! workload = { kind = "uniform", requests = 100, input_tokens = 100000, output_tokens = 20000, rate_rps = 8.0, seed = 7 }
//! slo = { name = "chat", ttft_ms = 600, max_itl_ms = 150 }
//! traffic = { ordinary_rps = 2.0, peak_rps = 8.0 }
//! memory = { context_tokens = 4096, concurrency = 8, device = "cpu", device_memory_gib = 24.0 }
//!
//! [[candidate]]
//! name = "small"
//! source = "gguf:small.gguf"
//! price_per_device_hour = 0.1
//! "#;
//! let v2 = v1.replace("ttft_ms = 600", "ttft_ms = 400");
//! let a = Study::from_toml("v1", v1).unwrap();
//! let b = Study::from_toml("v2", &v2).unwrap();
//! let c = changes(a.file(), b.file());
//! assert_eq!(c.len(), 1);
//! assert_eq!(c[0].path, "slo.ttft_ms");
//! assert_eq!((c[0].before.as_deref(), c[0].after.as_deref()), (Some("600"), Some("400")));
//! ```

use serde::Serialize;
use serde_json::{Map, Value};

use crate::study::StudyFile;

/// One criterion that differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// Where it stands in the study file: `question`, `slo.ttft_ms`, `candidate[NAME].source`,
    /// `disqualifier[NAME or METRIC]` (a whole entry added or removed), …
    pub path: String,
    /// The value before (`None`: not there). Text as it is; numbers, booleans, tables and lists
    /// as compact JSON.
    pub before: Option<String>,
    /// The value after (`None`: removed).
    pub after: Option<String>,
}

/// The lists of named entries, matched by name rather than by position.
const NAMED_LISTS: [&str; 2] = ["candidate", "disqualifier"];

/// The study file's tables and fields in the order the file format gives them.
const FIELD_ORDER: [&str; 12] = [
    "format",
    "name",
    "question",
    "evalset",
    "workload",
    "slo",
    "traffic",
    "memory",
    "quality",
    "cost",
    "candidate",
    "disqualifier",
];

/// Every criterion that differs from `from` to `to`: in the study file's order, the entries of
/// a list in `from`'s order then those only `to` has, a table's keys in alphabetical order.
pub fn changes(from: &StudyFile, to: &StudyFile) -> Vec<Change> {
    let (b, a) = (compared(from), compared(to));
    let mut keys: Vec<&String> = b
        .keys()
        .chain(a.keys().filter(|k| !b.contains_key(*k)))
        .collect();
    keys.sort_by_key(|k| {
        FIELD_ORDER
            .iter()
            .position(|f| f == k)
            .unwrap_or(FIELD_ORDER.len())
    });
    let mut out = Vec::new();
    for key in keys {
        match (b.get(key), a.get(key)) {
            (Some(Value::Array(x)), Some(Value::Array(y)))
                if NAMED_LISTS.contains(&key.as_str()) =>
            {
                let (x, y) = (by_name(x), by_name(y));
                for (name, item) in &x {
                    let other = y.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
                    walk(format!("{key}[{name}]"), Some(item), other, &mut out);
                }
                for (name, item) in y.iter().filter(|(n, _)| !x.iter().any(|(m, _)| m == n)) {
                    walk(format!("{key}[{name}]"), None, Some(item), &mut out);
                }
            }
            (x, y) => walk(key.clone(), x, y, &mut out),
        }
    }
    out
}

/// The study as the lock hash covers it, less its version and the version it replaces.
fn compared(file: &StudyFile) -> Map<String, Value> {
    let mut map = match serde_json::to_value(file) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    map.remove("version");
    map.remove("previous");
    map
}

/// A list's entries with their keys, in order: each its `name`; an unnamed rule its metric;
/// else (or when the key came before) its position from 1, as `#N`.
fn by_name(items: &[Value]) -> Vec<(String, &Value)> {
    let mut out: Vec<(String, &Value)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let named = ["name", "metric"]
            .iter()
            .find_map(|k| item.get(*k).and_then(Value::as_str));
        let key = match named {
            Some(n) if !out.iter().any(|(k, _)| k == n) => n.to_owned(),
            _ => format!("#{}", i + 1),
        };
        out.push((key, item));
    }
    out
}

fn walk(path: String, before: Option<&Value>, after: Option<&Value>, out: &mut Vec<Change>) {
    match (before, after) {
        (Some(Value::Object(b)), Some(Value::Object(a))) => {
            for key in b.keys().chain(a.keys().filter(|k| !b.contains_key(*k))) {
                walk(format!("{path}.{key}"), b.get(key), a.get(key), out);
            }
        }
        (b, a) if b != a => out.push(Change {
            path,
            before: b.map(text),
            after: a.map(text),
        }),
        _ => {}
    }
}

/// A value as text: a string as it is, anything else as compact JSON.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::Study;
    use proptest::prelude::*;

    const BASE: &str = r#"
format = "shortlist.study.v1"
name = "support"
question = "Which model answers support chats?"
evalset = { path = "set.yaml", sha256 = "0000000000000000000000000000000000000000000000000000000000000000" }
workload = { kind = "uniform", requests = 100, input_tokens = 100000, output_tokens = 20000, rate_rps = 8.0, seed = 7 }
slo = { name = "chat", ttft_ms = 600, max_itl_ms = 150 }
traffic = { ordinary_rps = 2.0, peak_rps = 8.0 }
memory = { context_tokens = 4096, concurrency = 8, device = "cpu", device_memory_gib = 24.0 }

[[candidate]]
name = "small"
source = "gguf:small.gguf"
price_per_device_hour = 0.1

[[candidate]]
name = "large"
source = "gguf:large.gguf"
price_per_device_hour = 0.3

[[disqualifier]]
name = "any high-value case failed"
metric = "high_value_failures"
op = ">"
value = 0

[[disqualifier]]
metric = "memory_fits"
op = "=="
value = false
"#;

    fn file(text: &str) -> StudyFile {
        Study::from_toml("t.study.toml", text)
            .unwrap()
            .file()
            .clone()
    }

    fn paths(c: &[Change]) -> Vec<&str> {
        c.iter().map(|c| c.path.as_str()).collect()
    }

    #[test]
    fn candidates_and_rules_are_matched_by_name_wherever_they_stand() {
        // `large` moved first and repriced; a rule's threshold changed; one rule added.
        let small = "[[candidate]]\nname = \"small\"\nsource = \"gguf:small.gguf\"\nprice_per_device_hour = 0.1\n\n";
        let large = "[[candidate]]\nname = \"large\"\nsource = \"gguf:large.gguf\"\nprice_per_device_hour = 0.3\n\n";
        let text = BASE
            .replacen(
                &format!("{small}{large}"),
                &format!("{}{small}", large.replace("0.3", "0.25")),
                1,
            )
            .replacen("value = 0\n", "value = 1\n", 1)
            + "\n[[disqualifier]]\nname = \"slow\"\nmetric = \"attainment_at_target\"\nop = \"<\"\nvalue = 0.9\n";
        let c = changes(&file(BASE), &file(&text));
        assert_eq!(
            paths(&c),
            [
                "candidate[large].price_per_device_hour",
                "disqualifier[any high-value case failed].value",
                "disqualifier[slow]",
            ]
        );
        assert_eq!(
            (c[0].before.as_deref(), c[0].after.as_deref()),
            (Some("0.3"), Some("0.25"))
        );
        assert_eq!(
            (c[1].before.as_deref(), c[1].after.as_deref()),
            (Some("0"), Some("1"))
        );
        assert_eq!(c[2].before, None);
        assert!(
            c[2].after
                .as_deref()
                .unwrap()
                .contains("attainment_at_target"),
            "{c:?}"
        );
    }

    #[test]
    fn a_candidate_removed_is_one_change_and_the_version_is_not_one() {
        let mut text = BASE.replacen(
            "[[candidate]]\nname = \"large\"\nsource = \"gguf:large.gguf\"\nprice_per_device_hour = 0.3\n",
            "",
            1,
        );
        text = text.replacen("name = \"support\"", "name = \"support\"\nversion = 3", 1);
        let c = changes(&file(BASE), &file(&text));
        assert_eq!(paths(&c), ["candidate[large]"]);
        assert_eq!(c[0].after, None);
        assert!(c[0].before.as_deref().unwrap().contains("gguf:large.gguf"));
    }

    #[test]
    fn an_unnamed_rule_is_known_by_its_metric() {
        let text = BASE.replacen(
            "[[disqualifier]]\nmetric = \"memory_fits\"\nop = \"==\"\nvalue = false\n",
            "",
            1,
        );
        assert_ne!(text, BASE);
        let c = changes(&file(BASE), &file(&text));
        assert_eq!(paths(&c), ["disqualifier[memory_fits]"]);
        assert_eq!(c[0].after, None);
    }

    #[test]
    fn texts_stay_text_and_tables_are_compared_key_by_key() {
        let text = BASE
            .replacen(
                "Which model answers support chats?",
                "Which model answers billing chats?",
                1,
            )
            .replacen(
                "slo = { name = \"chat\", ttft_ms = 600, max_itl_ms = 150 }",
                "slo = { name = \"chat\", ttft_ms = 600, e2e_ms = 9000 }",
                1,
            );
        let c = changes(&file(BASE), &file(&text));
        assert_eq!(paths(&c), ["question", "slo.max_itl_ms", "slo.e2e_ms"]);
        assert_eq!(
            c[0].after.as_deref(),
            Some("Which model answers billing chats?")
        );
        assert_eq!(
            (c[1].before.as_deref(), c[1].after.as_deref()),
            (Some("150"), None)
        );
        assert_eq!(
            (c[2].before.as_deref(), c[2].after.as_deref()),
            (None, Some("9000"))
        );
    }

    proptest! {
        #[test]
        fn no_change_exactly_when_the_criteria_hash_alike_and_backwards_is_the_mirror(
            ttft in prop::sample::select(vec![400u32, 600]),
            price in prop::sample::select(vec!["0.1", "0.2"]),
            drop_large in any::<bool>(),
            question in prop::sample::select(vec!["support", "billing"]),
        ) {
            let mut text = BASE
                .replacen("ttft_ms = 600", &format!("ttft_ms = {ttft}"), 1)
                .replacen("price_per_device_hour = 0.1", &format!("price_per_device_hour = {price}"), 1)
                .replacen("answers support chats", &format!("answers {question} chats"), 1);
            if drop_large {
                text = text.replacen(
                    "[[candidate]]\nname = \"large\"\nsource = \"gguf:large.gguf\"\nprice_per_device_hour = 0.3\n",
                    "",
                    1,
                );
            }
            let (a, b) = (Study::from_toml("a", BASE).unwrap(), Study::from_toml("b", &text).unwrap());
            let forth = changes(a.file(), b.file());
            let back = changes(b.file(), a.file());
            prop_assert_eq!(forth.is_empty(), a.canonical() == b.canonical());
            let (mut forth, mut back) = (forth, back);
            forth.sort_by(|x, y| x.path.cmp(&y.path));
            back.sort_by(|x, y| x.path.cmp(&y.path));
            prop_assert_eq!(paths(&forth), paths(&back));
            for (f, r) in forth.iter().zip(&back) {
                prop_assert_eq!(&f.before, &r.after);
                prop_assert_eq!(&f.after, &r.before);
                prop_assert!(f.before != f.after);
            }
            prop_assert!(changes(a.file(), a.file()).is_empty());
        }
    }
}
