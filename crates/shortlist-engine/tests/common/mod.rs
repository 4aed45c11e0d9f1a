//! Helpers shared by the engine's integration tests: the pinned reference data and the real
//! models (each test prints why it is skipped when a model is absent).

#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};

use serde_json::Value;
use shortlist_engine::fetch::{MODELS, default_models_dir, model_path};

/// A file of `tests/data/engine`.
pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/engine")
        .join(name)
}

/// The path of the docs/models.md model `name` in the models folder, or `None` (with the reason
/// printed) when it has not been fetched.
pub fn model(name: &str) -> Option<PathBuf> {
    let spec = MODELS.iter().find(|m| m.name == name).expect("known model");
    let path = model_path(&default_models_dir(), spec);
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "SKIPPED: {} is absent; run `shortlist models fetch` first",
            path.display()
        );
        None
    }
}

/// The JSON lines of a reference file in `tests/data/engine`.
pub fn jsonl(name: &str) -> Vec<Value> {
    std::fs::read_to_string(data(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .lines()
        .map(|l| serde_json::from_str(l).expect("valid JSON line"))
        .collect()
}

/// A JSON array of token ids.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// Holds `tok` to llama.cpp's pinned ids in `reference` (at least 16 strings): with and without
/// control tokens parsed, and the text back from the ids; reports every mismatch at once.
pub fn check_against_llama_cpp(tok: &shortlist_engine::tokenizer::Tokenizer, reference: &str) {
    let refs = jsonl(reference);
    assert!(refs.len() >= 16, "at least 16 pinned strings");
    let mut failures = Vec::new();
    for r in &refs {
        let text = r["text"].as_str().expect("text");
        let got = tok.encode(text, true, false).expect("encode");
        if got != ids(&r["ids"]) {
            failures.push(format!(
                "special {text:?}: got {got:?}, llama.cpp {}",
                r["ids"]
            ));
        }
        let plain = tok.encode(text, false, false).expect("encode");
        if plain != ids(&r["ids_plain"]) {
            failures.push(format!(
                "plain {text:?}: got {plain:?}, llama.cpp {}",
                r["ids_plain"]
            ));
        }
        let back = tok.decode(&got).expect("decode");
        if back != text {
            failures.push(format!("round trip {text:?} -> {back:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
