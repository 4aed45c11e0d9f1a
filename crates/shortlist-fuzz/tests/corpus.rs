//! Every fuzz target over its corpus in `fuzz/corpus/<target>/`: the seeds, and every input that
//! once found a crash or a hang, kept small. Runs in seconds with the workspace's tests; a corpus
//! that went missing or empty fails, so a target cannot stop being run unnoticed.

use std::path::Path;
use std::time::{Duration, Instant};

/// Inputs of one target slower than this are a hang in the making.
const SLOW: Duration = Duration::from_secs(10);

#[test]
fn every_target_passes_its_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let mut failures = Vec::new();
    for (name, target) in shortlist_fuzz::TARGETS {
        let dir = root.join(name);
        let mut inputs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("a directory entry").path())
            .filter(|p| p.is_file())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "{}: an empty corpus", dir.display());
        for input in inputs {
            let data = std::fs::read(&input).expect("readable");
            let started = Instant::now();
            let outcome = std::panic::catch_unwind(|| target(&data));
            let took = started.elapsed();
            if outcome.is_err() {
                failures.push(format!("{}: panicked", input.display()));
            } else if took > SLOW {
                failures.push(format!("{}: took {took:?}", input.display()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_target_has_a_corpus_folder_and_no_stray_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let mut folders: Vec<String> = std::fs::read_dir(&root)
        .expect("fuzz/corpus")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    folders.sort();
    let mut names: Vec<String> = shortlist_fuzz::TARGETS
        .iter()
        .map(|(n, _)| (*n).to_owned())
        .collect();
    names.sort();
    assert_eq!(folders, names);
}
