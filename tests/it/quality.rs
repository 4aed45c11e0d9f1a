//! `shortlist eval run` with a real model on the local engine: results, the per-category table,
//! and resuming from the progress file (skipped, with the reason printed, when the model is absent).

use serde_json::Value;

use crate::support::{data, run, smollm2, stderr, stdout};

#[test]
fn eval_run_scores_a_real_model_and_resumes() {
    let Some(model) = smollm2() else { return };
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("smol.results.json");
    let progress = dir.path().join("smol.progress.jsonl");
    let set = data("quality/mini.yaml").display().to_string();
    let candidate = format!("gguf:{}", model.display());
    let args = |extra: &[&str]| {
        let mut a = vec![
            "eval".to_owned(),
            "run".to_owned(),
            "--evalset".to_owned(),
            set.clone(),
            "--candidate".to_owned(),
            candidate.clone(),
            "--max-tokens".to_owned(),
            "24".to_owned(),
            // One compute thread, as the other tests running beside it leave one core.
            "--threads".to_owned(),
            "1".to_owned(),
            "-o".to_owned(),
            results.display().to_string(),
            "--progress".to_owned(),
            progress.display().to_string(),
        ];
        a.extend(extra.iter().map(|s| (*s).to_owned()));
        a
    };
    let first_args = args(&[]);
    let out = run(&first_args.iter().map(String::as_str).collect::<Vec<_>>());
    let code = out.status.code();
    assert!(
        matches!(code, Some(0) | Some(1)),
        "exit {code:?}: {}",
        stderr(&out)
    );
    let table = stdout(&out);
    assert!(table.contains("tool-call"), "{table}");
    let value: Value = serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    assert_eq!(value["format"], "shortlist.eval-results.v1");
    let cases = value["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 4);
    for case in cases {
        assert!(case["tokens"].as_u64().is_some(), "{case}");
        assert!(case["latency_s"].as_f64().unwrap() > 0.0, "{case}");
        // The default 32 in flight, of which the set's 4 cases could fill 4: the population
        // each case's wall time was shared with.
        assert_eq!(case["concurrency"], 4, "{case}");
        // Greedy: the smallest top-2 logit gap along the answer, for the record's near-ties.
        assert!(case["min_top2_gap"].as_f64().unwrap() >= 0.0, "{case}");
    }
    // Greedy decoding is deterministic: a small model knows the capital of France.
    let capital = cases.iter().find(|c| c["id"] == "capital").unwrap();
    assert_eq!(capital["outcome"], "pass", "{capital}");

    // Keep only the header and the first two finished cases, as if the run had been killed.
    let text = std::fs::read_to_string(&progress).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(3)
        .collect();
    std::fs::write(&progress, kept.join("\n") + "\n").unwrap();
    let out = run(&args(&["--json"])
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>());
    assert!(
        stderr(&out).contains("resuming: 2 of 4 cases already done"),
        "{}",
        stderr(&out)
    );
    let again: Value = serde_json::from_str(&stdout(&out)).unwrap();
    // Resumed and re-run cases give the same results (greedy decoding); only the run's
    // conditions differ: latency, and the cases in flight (the 2 left, where the first run had 4).
    let strip = |v: &Value| -> Vec<Value> {
        v["cases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let mut c = c.clone();
                let fields = c.as_object_mut().unwrap();
                fields.remove("latency_s");
                fields.remove("concurrency");
                c
            })
            .collect()
    };
    assert_eq!(strip(&again), strip(&value));
    let rerun: Vec<&Value> = again["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["concurrency"] == 2)
        .collect();
    assert_eq!(rerun.len(), 2, "{again}");
}

#[test]
fn eval_run_rejects_unknown_candidates() {
    let out = run(&[
        "eval",
        "run",
        "--evalset",
        &data("quality/mini.yaml").display().to_string(),
        "--candidate",
        "model.bin",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("candidate `model.bin`"),
        "{}",
        stderr(&out)
    );
}
