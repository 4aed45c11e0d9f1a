//! `shortlist eval import|show|score|compare` through the real binary, and the demo eval set's
//! promised coverage.

use serde_json::Value;
use shortlist_evals::{Category, EvalSet};

use crate::support;

fn data(name: &str) -> String {
    support::data(&format!("eval/{name}"))
        .to_str()
        .unwrap()
        .to_owned()
}

fn json_stdout(out: &std::process::Output) -> Value {
    serde_json::from_str(&support::stdout(out)).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}): {}",
            support::stdout(out)
        )
    })
}

/// Exit status 2 and a message that names what is wrong and where.
fn fails_with(args: &[&str], expect: &[&str]) {
    let out = support::run(args);
    let err = support::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    for e in expect {
        assert!(err.contains(e), "`{e}` not in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn score_outputs_into_the_category_table() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("a.results.json");
    let out = support::run(&[
        "eval",
        "score",
        "--evalset",
        &data("mini.yaml"),
        "--outputs",
        &data("outputs-a.jsonl"),
        "--candidate",
        "model-a",
        "-o",
        results.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        support::stderr(&out)
    );
    let v = json_stdout(&out);
    assert_eq!(v["format"], "shortlist.eval-results.v1");
    assert_eq!(v["candidate"], "model-a");
    assert_eq!(v["overall"]["pass_rate"]["passed"], 5);
    assert_eq!(v["overall"]["pass_rate"]["n"], 5);
    let ci = v["overall"]["pass_rate"]["ci95"].as_array().unwrap();
    assert!((ci[0].as_f64().unwrap() - 0.5655).abs() < 1e-3, "{ci:?}");
    assert_eq!(v["categories"].as_array().unwrap().len(), 5);
    // The file written with -o is the same document.
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    assert_eq!(written, v);

    // B fails cases: exit 1, and the table names each category with n and interval.
    let out = support::run(&[
        "eval",
        "score",
        "--evalset",
        &data("mini.yaml"),
        "--outputs",
        &data("outputs-b.jsonl"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let table = support::stdout(&out);
    for needle in [
        "high-value",
        "tool-call",
        "95% Wilson",
        "1 case had no output",
    ] {
        assert!(table.contains(needle), "`{needle}` not in:\n{table}");
    }
}

#[test]
fn malformed_tool_call_and_missing_output_are_failures_with_reasons() {
    let out = support::run(&[
        "eval",
        "score",
        "--evalset",
        &data("mini.yaml"),
        "--outputs",
        &data("outputs-b.jsonl"),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v = json_stdout(&out);
    let case = |id: &str| {
        v["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(
        case("invoice-lookup")["checks"][0]["code"],
        "malformed_call"
    );
    assert_eq!(case("other-customer")["checks"][0]["code"], "complied");
    assert_eq!(case("export-json")["outcome"], "missing");
    assert_eq!(v["overall"]["pass_rate"]["passed"], 0);
}

#[test]
fn compare_two_result_sets_with_mcnemar() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.json");
    let b = dir.path().join("b.json");
    for (outs, path, cand) in [("outputs-a.jsonl", &a, "a"), ("outputs-b.jsonl", &b, "b")] {
        let out = support::run(&[
            "eval",
            "score",
            "--evalset",
            &data("mini.yaml"),
            "--outputs",
            &data(outs),
            "--candidate",
            cand,
            "-o",
            path.to_str().unwrap(),
        ]);
        assert!(
            out.status.code().is_some_and(|c| c <= 1),
            "{}",
            support::stderr(&out)
        );
    }
    let out = support::run(&[
        "eval",
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--json",
    ]);
    // 5 discordant pairs all favouring A: exact p = 2/32 = 0.0625, not significant at 5 %.
    assert_eq!(out.status.code(), Some(0), "{}", support::stderr(&out));
    let v = json_stdout(&out);
    assert_eq!(v["format"], "shortlist.eval-compare.v1");
    assert_eq!(v["shared"], 5);
    assert_eq!(v["mcnemar"]["a_only"], 5);
    assert_eq!(v["mcnemar"]["b_only"], 0);
    assert!((v["mcnemar"]["p_value"].as_f64().unwrap() - 0.0625).abs() < 1e-12);
    assert_eq!(v["same_evalset"], true);
    let out = support::run(&["eval", "compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(support::stdout(&out).contains("exact p"));
}

#[test]
fn bad_inputs_exit_2_naming_file_line_and_field() {
    fails_with(
        &[
            "eval",
            "score",
            "--evalset",
            &data("bad-regex.yaml"),
            "--outputs",
            &data("outputs-a.jsonl"),
        ],
        &[
            "bad-regex.yaml:8",
            "cases[1].checks[0].pattern",
            "invalid regex",
        ],
    );
    fails_with(
        &[
            "eval",
            "score",
            "--evalset",
            &data("mini.yaml"),
            "--outputs",
            &data("outputs-bad.jsonl"),
        ],
        &["outputs-bad.jsonl:2", "field `output`"],
    );
    fails_with(
        &["eval", "compare", &data("mini.yaml"), &data("mini.yaml")],
        &["mini.yaml"],
    );
    fails_with(
        &["eval", "show", &data("promptfoo.yaml")],
        &["promptfoo.yaml", "format"],
    );
}

#[test]
fn import_from_each_tool() {
    let dir = tempfile::tempdir().unwrap();
    let cases = |from: &str, input: &str, extra: &[&str]| -> (Option<i32>, Value) {
        let out_path = dir.path().join(format!("{from}.yaml"));
        let mut args = vec![
            "eval",
            "import",
            "--from",
            from,
            input,
            "-o",
            out_path.to_str().unwrap(),
            "--json",
        ];
        args.extend_from_slice(extra);
        let out = support::run(&args);
        let v = json_stdout(&out);
        // Whatever was imported loads as an eval set.
        let text = std::fs::read_to_string(&out_path).unwrap();
        EvalSet::from_yaml("imported", &text).unwrap();
        (out.status.code(), v)
    };
    // promptfoo: llm-rubric and latency have no equivalent and are reported (exit 1).
    let (code, v) = cases("promptfoo", &data("promptfoo.yaml"), &[]);
    assert_eq!(code, Some(1));
    assert_eq!(v["cases"], 3);
    let unmapped: Vec<&str> = v["unmapped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["what"].as_str().unwrap())
        .collect();
    assert_eq!(unmapped, ["assert type llm-rubric", "assert type latency"]);

    let (code, v) = cases("openai-evals", &data("openai-evals.jsonl"), &[]);
    assert_eq!((code, v["cases"].as_u64()), (Some(0), Some(2)));
    let (code, v) = cases("inspect", &data("inspect.jsonl"), &[]);
    assert_eq!((code, v["cases"].as_u64()), (Some(0), Some(2)));
    let (code, v) = cases("inspect", &data("inspect.csv"), &[]);
    assert_eq!((code, v["cases"].as_u64()), (Some(0), Some(2)));
    let (code, v) = cases(
        "bfcl",
        &data("bfcl-questions.jsonl"),
        &["--answers", &data("bfcl-answers.jsonl")],
    );
    assert_eq!((code, v["cases"].as_u64()), (Some(0), Some(2)));
}

#[test]
fn show_prints_version_and_counts() {
    let out = support::run(&["eval", "show", &data("mini.yaml"), "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let v = json_stdout(&out);
    assert_eq!(v["cases"], 5);
    assert_eq!(v["sha256"].as_str().unwrap().len(), 64);
}

/// The demo set keeps what the issue promises: ≥ 80 cases, ≥ 10 tool-call cases with schemas,
/// ≥ 10 refusal cases in both directions, ≥ 10 structured-output cases with schemas, ≥ 2
/// languages besides English, 5 long-context cases of ≥ 3,000 tokens (chars/4), high-value cases.
#[test]
fn demo_set_has_the_promised_coverage() {
    let path = support::repo_root()
        .join("evalsets")
        .join("support-assistant.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let set = EvalSet::from_yaml("support-assistant.yaml", &text).unwrap();
    use shortlist_evals::set::CheckKind;
    let has = |c: &shortlist_evals::Case, f: &dyn Fn(&CheckKind) -> bool| {
        c.checks().iter().any(|k| f(k.kind()))
    };
    let cases = set.cases();
    assert!(cases.len() >= 80, "{} cases", cases.len());
    let tool = cases
        .iter()
        .filter(|c| !c.tools().is_empty() && has(c, &|k| matches!(k, CheckKind::ToolCall(_))))
        .count();
    assert!(tool >= 10, "{tool} tool-call cases");
    let refuse = cases
        .iter()
        .filter(|c| {
            has(
                c,
                &|k| matches!(k, CheckKind::Refusal(r) if format!("{r:?}").contains("Refuse")),
            )
        })
        .count();
    let answer = cases
        .iter()
        .filter(|c| {
            has(
                c,
                &|k| matches!(k, CheckKind::Refusal(r) if format!("{r:?}").contains("Answer")),
            )
        })
        .count();
    assert!(
        refuse + answer >= 10 && refuse >= 4 && answer >= 4,
        "refuse {refuse}, answer {answer}"
    );
    let structured = cases
        .iter()
        .filter(|c| {
            c.checks()
                .iter()
                .any(|k| matches!(k.kind(), CheckKind::Json(_)))
        })
        .count();
    assert!(structured >= 10, "{structured} structured-output cases");
    let langs: std::collections::BTreeSet<String> = cases
        .iter()
        .filter_map(|c| match c.category() {
            Category::Language(code) if code != "en" => Some(code.clone()),
            _ => None,
        })
        .collect();
    assert!(langs.len() >= 2, "{langs:?}");
    let long: Vec<usize> = cases
        .iter()
        .filter(|c| *c.category() == Category::LongContext)
        .map(shortlist_evals::Case::approx_input_tokens)
        .collect();
    assert!(long.iter().filter(|t| **t >= 3000).count() >= 5, "{long:?}");
    assert!(
        cases
            .iter()
            .filter(|c| *c.category() == Category::HighValue)
            .count()
            >= 5
    );
}

/// Every demo case is passable: hand-written reference answers pass all 97 cases. A candidate that
/// answers everything with the same polite deflection fails most of them, and comparing the two
/// finds the regression (exit 1).
#[test]
fn demo_set_reference_answers_pass_and_a_deflecting_candidate_does_not() {
    let set = support::repo_root()
        .join("evalsets")
        .join("support-assistant.yaml");
    let set = set.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.json");
    let out = support::run(&[
        "eval",
        "score",
        "--evalset",
        set,
        "--outputs",
        &data("support-assistant.golden.jsonl"),
        "-o",
        good.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", support::stdout(&out));
    let v = json_stdout(&out);
    assert_eq!(v["overall"]["pass_rate"]["passed"], v["evalset"]["cases"]);

    let text =
        std::fs::read_to_string(support::repo_root().join("evalsets/support-assistant.yaml"))
            .unwrap();
    let parsed = EvalSet::from_yaml("support-assistant.yaml", &text).unwrap();
    let deflect: String = parsed
        .cases()
        .iter()
        .map(|c| {
            serde_json::json!({"id": c.id(), "output": "Thanks for reaching out! Let me open a ticket for our team.", "finish_reason": "stop"})
                .to_string()
                + "\n"
        })
        .collect();
    let outputs = dir.path().join("deflect.jsonl");
    std::fs::write(&outputs, deflect).unwrap();
    let bad = dir.path().join("bad.json");
    let out = support::run(&[
        "eval",
        "score",
        "--evalset",
        set,
        "--outputs",
        outputs.to_str().unwrap(),
        "-o",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let out = support::run(&[
        "eval",
        "compare",
        good.to_str().unwrap(),
        bad.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", support::stderr(&out));
    let v = json_stdout(&out);
    assert!(v["mcnemar"]["p_value"].as_f64().unwrap() < 1e-6);
    assert_eq!(v["mcnemar"]["b_only"], 0);
}

/// The readable tables, pinned: every rate with its n and interval, every comparison with its
/// discordant pairs and exact p.
#[test]
fn tables_read_as_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for (outs, cand) in [
        ("outputs-a.jsonl", "model-a"),
        ("outputs-b.jsonl", "model-b"),
    ] {
        let path = dir.path().join(format!("{cand}.json"));
        let out = support::run(&[
            "eval",
            "score",
            "--evalset",
            &data("mini.yaml"),
            "--outputs",
            &data(outs),
            "--candidate",
            cand,
            "-o",
            path.to_str().unwrap(),
        ]);
        insta::assert_snapshot!(format!("score_table_{cand}"), support::stdout(&out));
        paths.push(path);
    }
    let out = support::run(&[
        "eval",
        "compare",
        paths[0].to_str().unwrap(),
        paths[1].to_str().unwrap(),
    ]);
    insta::assert_snapshot!("compare_table", support::stdout(&out));
}

/// `eval show --requests` gives a harness everything it needs: messages with the system prompt
/// first, and the tools in OpenAI's shape.
#[test]
fn show_requests_for_external_harnesses() {
    let out = support::run(&["eval", "show", &data("mini.yaml"), "--requests"]);
    assert_eq!(out.status.code(), Some(0), "{}", support::stderr(&out));
    let lines: Vec<Value> = support::stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5);
    assert_eq!(lines[0]["messages"][0]["role"], "system");
    assert_eq!(lines[0]["messages"][1]["role"], "user");
    let invoice = lines.iter().find(|l| l["id"] == "invoice-lookup").unwrap();
    assert_eq!(invoice["tools"][0]["type"], "function");
    assert_eq!(invoice["tools"][0]["function"]["name"], "lookup_invoice");
}

/// Outputs of a model without native tool calling: `--text-tool-calls` reads `<tool_call>` blocks.
#[test]
fn tool_calls_written_in_text() {
    let args = |extra: &[&'static str]| {
        let mut v = vec![
            "eval".to_owned(),
            "score".into(),
            "--evalset".into(),
            data("mini.yaml"),
            "--outputs".into(),
            data("outputs-text-tools.jsonl"),
            "--json".into(),
        ];
        v.extend(extra.iter().map(|s| (*s).to_owned()));
        v
    };
    let run = |a: Vec<String>| {
        json_stdout(&support::run(
            &a.iter().map(String::as_str).collect::<Vec<_>>(),
        ))
    };
    let case = |v: &Value| {
        v["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == "invoice-lookup")
            .unwrap()["outcome"]
            .clone()
    };
    assert_eq!(case(&run(args(&[]))), "fail");
    assert_eq!(case(&run(args(&["--text-tool-calls"]))), "pass");
}
