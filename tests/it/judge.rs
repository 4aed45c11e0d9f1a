//! LLM-judge checks through the real binary: `eval run --judge` with the real SmolLM2 model as
//! judge (its raw verdict text kept, each check decided or explicitly unscored, never silently
//! passed), `eval calibrate-judge` on a small labels file (κ and the gate), and
//! `eval score --judge-calibration` (advisory vs may disqualify). Real-model tests are skipped, with
//! the reason printed, when the model is absent.

use serde_json::{Value, json};

use crate::support::{data, run, smollm2, stderr, stdout};

fn set() -> String {
    data("judge/judged.yaml").display().to_string()
}

/// `shortlist eval score` of the judge fixture's stored outputs, with `extra` options.
fn score_outputs(extra: &[&str]) -> std::process::Output {
    let outputs = data("judge/outputs.jsonl").display().to_string();
    let set = set();
    let mut args = vec!["eval", "score", "--evalset", &set, "--outputs", &outputs];
    args.extend_from_slice(extra);
    run(&args)
}

fn case<'a>(results: &'a Value, id: &str) -> &'a Value {
    results["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("case {id} in {results}"))
}

fn check<'a>(case: &'a Value, name: &str) -> &'a Value {
    case["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("check {name} in {case}"))
}

#[test]
fn eval_run_asks_a_real_judge_and_keeps_its_verdict_text() {
    let Some(model) = smollm2() else { return };
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("judged.results.json");
    let gguf = format!("gguf:{}", model.display());
    let out = run(&[
        "eval",
        "run",
        "--evalset",
        &set(),
        "--candidate",
        &gguf,
        "--judge",
        &format!("smol={gguf}"),
        "--max-tokens",
        "12",
        "--judge-max-tokens",
        "24",
        "--threads",
        "1",
        "-o",
        results.to_str().unwrap(),
        "--progress",
        dir.path().join("p.jsonl").to_str().unwrap(),
    ]);
    let code = out.status.code();
    assert!(
        matches!(code, Some(0) | Some(1)),
        "exit {code:?}: {}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("judged by `absent`, and no --judge absent=SOURCE was given"),
        "{}",
        stderr(&out)
    );
    let table = stdout(&out);
    assert!(table.contains("judge checks"), "{table}");
    assert!(table.contains("correct (judge smol"), "{table}");
    assert!(table.contains("advisory: no calibration"), "{table}");

    let value: Value = serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    for id in ["capital", "greeting"] {
        let c = case(&value, id);
        let j = &c["judgements"][0];
        assert_eq!(j["check"], "correct", "{c}");
        assert_eq!(j["judge"], "smol", "{c}");
        assert!(j["judge_model"].as_str().is_some(), "{c}");
        let text = j["judge_output"]
            .as_str()
            .expect("the judge's raw text is kept");
        // The verdict is what the judge's text says, and the check follows it: a text with neither
        // PASS nor FAIL leaves the check unscored, never passed.
        let said = text
            .match_indices("PASS")
            .chain(text.match_indices("FAIL"))
            .filter(|(i, w)| {
                let before = text[..*i].chars().last();
                let after = text[i + w.len()..].chars().next();
                !before.is_some_and(char::is_alphanumeric)
                    && !after.is_some_and(char::is_alphanumeric)
            })
            .max_by_key(|(i, _)| *i)
            .map(|(_, w)| w);
        let expected = match said {
            Some("PASS") => "pass",
            Some(_) => "fail",
            None => "unscored",
        };
        assert_eq!(j["verdict"], expected, "{c}");
        assert_eq!(check(c, "correct")["outcome"], expected, "{c}");
        if expected == "unscored" {
            assert_eq!(check(c, "correct")["code"], "judge_unparseable", "{c}");
            assert_ne!(c["outcome"], "pass", "{c}");
        }
        assert_eq!(j["gate"]["status"], "advisory", "{c}");
    }
    let unjudged = case(&value, "unjudged");
    let polite = check(unjudged, "polite");
    assert_eq!(polite["outcome"], "unscored", "{unjudged}");
    assert_eq!(polite["code"], "judge_not_provided", "{unjudged}");
    assert_eq!(unjudged["outcome"], "unscored", "{unjudged}");
    assert!(unjudged["judgements"][0].get("judge_output").is_none());
}

#[test]
fn calibrate_judge_computes_kappa_and_reports_the_gate() {
    let Some(model) = smollm2() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cal = dir.path().join("smol.calibration.json");
    let labels = data("judge/capital.labels.jsonl").display().to_string();
    let judge = format!("smol=gguf:{}", model.display());
    let args = [
        "eval",
        "calibrate-judge",
        "--evalset",
        &set(),
        "--labels",
        &labels,
        "--judge",
        &judge,
        "--max-tokens",
        "24",
        "-o",
        cal.to_str().unwrap(),
    ];
    let out = run(&args);
    // Four labelled replies are below the 20-item bar: the record is written, the check fails.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("Cohen's κ"), "{text}");
    assert!(
        text.contains("gate (≥ 20 items, κ ≥ 0.6): not met"),
        "{text}"
    );
    let record: Value = serde_json::from_str(&std::fs::read_to_string(&cal).unwrap()).unwrap();
    assert_eq!(record["format"], "shortlist.judge-calibration.v1");
    assert_eq!(record["judge"], "smol");
    assert!(record["judge_model"].as_str().is_some(), "{record}");
    let decided = record["labels"].as_array().unwrap();
    let undecided = record["undecided"].as_array().map_or(0, Vec::len);
    assert_eq!(decided.len() + undecided, 4, "{record}");
    for l in decided {
        assert!(l["judge_output"].as_str().is_some(), "{l}");
    }
    let summary = &record["summary"];
    assert!(summary["kappa"].as_f64().unwrap().is_finite(), "{record}");
    assert!(summary["agreement"].as_f64().is_some(), "{record}");
    assert_eq!(summary["meets_gate"], false);

    // --json prints the record itself.
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let out = run(&with_json);
    let printed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(printed["format"], "shortlist.judge-calibration.v1");

    // Scoring with that calibration: the judge check is advisory, and says why.
    let out = score_outputs(&["--judge-calibration", cal.to_str().unwrap(), "--json"]);
    let results: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let gate = &results["judge_checks"][0]["gate"];
    assert_eq!(gate["status"], "advisory", "{results}");
    assert!(
        gate["reason"].as_str().unwrap().contains("below the bar"),
        "{gate}"
    );
}

#[test]
fn a_calibration_meeting_the_bar_lets_the_judge_check_disqualify() {
    let dir = tempfile::tempdir().unwrap();
    let out = score_outputs(&["--json"]);
    let results: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(case(&results, "capital")["outcome"], "pass");
    assert_eq!(case(&results, "greeting")["outcome"], "fail");
    let j = &results["judge_checks"][0];
    assert_eq!(
        (j["passed"].as_u64(), j["failed"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(j["gate"]["status"], "advisory");
    assert_eq!(
        case(&results, "greeting")["judgements"][0]["judge_output"],
        "No capital named.\nFAIL"
    );

    // 24 labelled items, judge and human agreeing on all: κ = 1 meets the bar.
    let labels: Vec<Value> = (0..24)
        .map(|i| json!({"case": format!("c{i}"), "human": i % 2 == 0, "judge": i % 2 == 0}))
        .collect();
    let cal = dir.path().join("good.calibration.json");
    let record = json!({
        "format": "shortlist.judge-calibration.v1",
        "judge": "smol",
        "rubric_sha256": j["rubric_sha256"],
        "labels": labels,
    });
    std::fs::write(&cal, record.to_string()).unwrap();
    let out = score_outputs(&["--judge-calibration", cal.to_str().unwrap()]);
    let table = stdout(&out);
    assert!(
        table.contains("may disqualify: calibrated: κ = 1.00 on 24"),
        "{table}"
    );
    // The check judged by `absent` has no calibration: still advisory.
    assert!(table.contains("polite (judge absent"), "{table}");
}

#[test]
fn bad_judge_input_is_named_not_panicked_on() {
    let labels = data("judge/unknown-case.labels.jsonl")
        .display()
        .to_string();
    let cal = tempfile::tempdir().unwrap();
    let out_path = cal.path().join("c.json");
    let out = run(&[
        "eval",
        "calibrate-judge",
        "--evalset",
        &set(),
        "--labels",
        &labels,
        "--judge",
        "smol=gguf:/nonexistent/model.gguf",
        "-o",
        out_path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("unknown-case.labels.jsonl:2: field `id`") && err.contains("no case"),
        "{err}"
    );

    let out = run(&[
        "eval",
        "run",
        "--evalset",
        &set(),
        "--candidate",
        "gguf:/nonexistent/model.gguf",
        "--judge",
        "model.gguf",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("NAME=SOURCE"), "{}", stderr(&out));

    let bad = cal.path().join("bad.calibration.json");
    std::fs::write(&bad, r#"{"format": "shortlist.judge-calibration.v2", "judge": "smol", "rubric_sha256": "ab", "labels": []}"#).unwrap();
    let out = score_outputs(&["--judge-calibration", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("bad.calibration.json") && err.contains("unsupported format"),
        "{err}"
    );
}
