//! `shortlist trace synth|import|stats|fit` through the real binary: exact practice totals,
//! importers on small fixtures, line-numbered errors with exit status 2, fitting side by side.

use serde_json::Value;

use crate::support;

fn json_of(out: &std::process::Output) -> Value {
    assert!(out.status.success(), "stderr: {}", support::stderr(out));
    serde_json::from_str(&support::stdout(out)).expect("stdout is exactly one JSON document")
}

fn stats(path: &std::path::Path) -> Value {
    json_of(&support::run(&[
        "trace",
        "stats",
        path.to_str().unwrap(),
        "--json",
    ]))
}

/// Exit status 2 and a message that names the file, line and field.
fn fails_with(args: &[&str], expect: &[&str]) {
    let out = support::run(args);
    assert_eq!(
        out.status.code(),
        Some(2),
        "stdout: {}",
        support::stdout(&out)
    );
    let err = support::stderr(&out);
    for e in expect {
        assert!(err.contains(e), "`{e}` not in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn practice_traces_hold_their_totals() {
    let dir = tempfile::tempdir().unwrap();
    for (shape, sent) in [
        ("uniform", 100_000),
        ("bursts", 100_000),
        ("prefix-groups", 820_000),
    ] {
        let path = dir.path().join(format!("{shape}.trace.jsonl"));
        let out = support::run(&[
            "trace",
            "synth",
            "--shape",
            shape,
            "--seed",
            "11",
            "-o",
            path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", support::stderr(&out));
        let s = stats(&path);
        assert_eq!(s["format"], "shortlist.trace-stats.v1");
        assert_eq!(s["requests"], 100);
        assert_eq!(s["duration_s"], 12.5);
        assert_eq!(s["input_tokens"]["sent"], sent);
        assert_eq!(s["input_tokens"]["distinct"], 100_000);
        assert_eq!(s["output_tokens"], 20_000);
        assert_eq!(s["rate_rps"]["mean"], 8.0);
        for key in ["peak_1s", "peak_10s"] {
            assert!(s["rate_rps"][key].is_number(), "{key}");
        }
        for key in ["p50", "p90", "p99"] {
            assert!(s["input_len"][key].is_u64() && s["output_len"][key].is_u64());
        }
        assert!(s.get("interarrival_cv").is_some() && s.get("prefix_groups").is_some());
    }
    let groups = stats(&dir.path().join("prefix-groups.trace.jsonl"));
    assert_eq!(groups["prefix_groups"], 10);
    let bursts = stats(&dir.path().join("bursts.trace.jsonl"));
    assert!(bursts["rate_rps"]["peak_1s"].as_f64().unwrap() >= 20.0);
}

#[test]
fn same_seed_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.jsonl");
    let b = dir.path().join("b.jsonl");
    for p in [&a, &b] {
        let out = support::run(&[
            "trace",
            "synth",
            "--shape",
            "bursts",
            "--seed",
            "5",
            "-o",
            p.to_str().unwrap(),
        ]);
        assert!(out.status.success());
    }
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
}

#[test]
fn poisson_arrivals_keep_the_totals() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.jsonl");
    let out = support::run(&[
        "trace",
        "synth",
        "--shape",
        "uniform",
        "--requests",
        "2000",
        "--input-tokens",
        "2000000",
        "--output-tokens",
        "400000",
        "--cv",
        "1",
        "--seed",
        "2",
        "-o",
        p.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", support::stderr(&out));
    let s = stats(&p);
    assert_eq!(s["input_tokens"]["sent"], 2_000_000);
    let cv = s["interarrival_cv"].as_f64().unwrap();
    assert!((cv - 1.0).abs() < 0.1, "{cv}");
    let d = s["dispersion"]["counts_10s"].as_f64().unwrap();
    assert!((d - 1.0).abs() < 0.5, "{d}");
    fails_with(
        &[
            "trace",
            "synth",
            "--shape",
            "bursts",
            "--cv",
            "1",
            "-o",
            p.to_str().unwrap(),
        ],
        &["own arrival pattern"],
    );
}

#[test]
fn infeasible_synth_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.jsonl");
    fails_with(
        &[
            "trace",
            "synth",
            "--shape",
            "prefix-groups",
            "--input-tokens",
            "50000",
            "-o",
            p.to_str().unwrap(),
        ],
        &["prefix", "needs 80100 or more"],
    );
    assert!(!p.exists());
}

#[test]
fn imports_azure_mooncake_and_burstgpt() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = |n: &str| dir.path().join(n);

    let azure = out_path("azure.trace.jsonl");
    let out = support::run(&[
        "trace",
        "import",
        "--from",
        "azure",
        support::data("trace/azure_conv.csv").to_str().unwrap(),
        "-o",
        azure.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", support::stderr(&out));
    let s = stats(&azure);
    assert_eq!(s["requests"], 6);
    assert_eq!(s["input_tokens"]["sent"], 374 + 396 + 879 + 91 + 91 + 2048);
    // 18:15:46.6805900 → 18:15:53.5581200: the 7-digit fractions survive exactly.
    assert!(
        (s["duration_s"].as_f64().unwrap() - 6.87753).abs() < 1e-9,
        "{}",
        s["duration_s"]
    );

    let moon = out_path("mooncake.trace.jsonl");
    let out = support::run(&[
        "trace",
        "import",
        "--from",
        "mooncake",
        support::data("trace/mooncake_conv.jsonl").to_str().unwrap(),
        "-o",
        moon.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", support::stderr(&out));
    let header: Value = serde_json::from_str(
        std::fs::read_to_string(&moon)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(header["block_size"], 512);
    let s = stats(&moon);
    assert_eq!(s["requests"], 12);
    assert!(s["prefix_reuse"].as_f64().unwrap() > 0.2, "{s}");
    assert!(s["input_tokens"]["distinct"].as_u64() < s["input_tokens"]["sent"].as_u64());
    assert_eq!(s["quantization"]["bucket_s"], 3.0);

    for (fixture, requests, failed) in [("burstgpt_v1.csv", 5, 2), ("burstgpt_v3.csv", 4, 1)] {
        let dst = out_path(&format!("{fixture}.jsonl"));
        let out = support::run(&[
            "trace",
            "import",
            "--from",
            "burstgpt",
            support::data(&format!("trace/{fixture}")).to_str().unwrap(),
            "-o",
            dst.to_str().unwrap(),
            "--json",
        ]);
        let doc = json_of(&out);
        assert_eq!(doc["requests"], requests);
        assert_eq!(doc["failed"], failed);
        let s = stats(&dst);
        assert_eq!(s["failed"], failed);
        assert_eq!(s["requests"], requests);
    }
    let text = std::fs::read_to_string(out_path("burstgpt_v3.csv.jsonl")).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["session"], "a1");
    assert_eq!(last["turn"], 3);
}

#[test]
fn bad_inputs_name_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.jsonl");
    let o = out.to_str().unwrap();
    let data = |n: &str| {
        support::data(&format!("trace/{n}"))
            .to_str()
            .unwrap()
            .to_owned()
    };
    fails_with(
        &["trace", "stats", &data("unsorted.trace.jsonl")],
        &["unsorted.trace.jsonl:4: field `t`"],
    );
    fails_with(
        &["trace", "stats", &data("negative.trace.jsonl")],
        &[
            "negative.trace.jsonl:2: field `output_tokens`",
            "non-negative",
        ],
    );
    fails_with(
        &["trace", "stats", &data("v2.trace.jsonl")],
        &["v2.trace.jsonl:1: field `format`", "unsupported version"],
    );
    fails_with(
        &[
            "trace",
            "import",
            "--from",
            "azure",
            &data("azure_unsorted.csv"),
            "-o",
            o,
        ],
        &["azure_unsorted.csv:4: field `TIMESTAMP`", "sorted"],
    );
    fails_with(
        &[
            "trace",
            "import",
            "--from",
            "burstgpt",
            &data("burstgpt_bad.csv"),
            "-o",
            o,
        ],
        &["burstgpt_bad.csv:3: field `Request tokens`"],
    );
    fails_with(
        &[
            "trace",
            "import",
            "--from",
            "mooncake",
            &data("azure_conv.csv"),
            "-o",
            o,
        ],
        &["azure_conv.csv:1:"],
    );
    fails_with(
        &["trace", "stats", "/nonexistent/x.jsonl"],
        &["cannot open /nonexistent/x.jsonl"],
    );
    assert!(!out.exists(), "a failed import leaves no output behind");
}

#[test]
fn fit_prints_source_and_synthetic_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.jsonl");
    let dst = dir.path().join("fit.jsonl");
    let out = support::run(&[
        "trace",
        "synth",
        "--shape",
        "bursts",
        "--requests",
        "1000",
        "--input-tokens",
        "1000000",
        "--output-tokens",
        "200000",
        "--bursts",
        "50",
        "-o",
        src.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", support::stderr(&out));
    let out = support::run(&[
        "trace",
        "fit",
        src.to_str().unwrap(),
        "--requests",
        "500",
        "--seed",
        "3",
        "-o",
        dst.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", support::stderr(&out));
    let text = support::stdout(&out);
    assert!(
        text.contains("source") && text.contains("synthetic") && text.contains("inter-arrival CV"),
        "{text}"
    );
    let s = stats(&dst);
    assert_eq!(s["requests"], 500);
    let doc = json_of(&support::run(&[
        "trace",
        "fit",
        src.to_str().unwrap(),
        "--requests",
        "500",
        "--seed",
        "3",
        "-o",
        dst.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(doc["format"], "shortlist.trace-fit.v1");
    assert_eq!(doc["method"], "requests");
    assert_eq!(doc["source"]["requests"], 1000);
    assert_eq!(doc["synthetic"]["requests"], 500);
    let rho = |k: &str| doc[k]["length_spearman"].as_f64().unwrap();
    assert!((rho("source") - rho("synthetic")).abs() < 0.15);
}

#[test]
fn fit_resamples_conversations_whole() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.jsonl");
    let dst = dir.path().join("fit.jsonl");
    let out = support::run(&[
        "trace",
        "import",
        "--from",
        "burstgpt",
        support::data("trace/burstgpt_v3.csv").to_str().unwrap(),
        "-o",
        src.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", support::stderr(&out));
    let doc = json_of(&support::run(&[
        "trace",
        "fit",
        src.to_str().unwrap(),
        "--requests",
        "20",
        "--by",
        "sessions",
        "-o",
        dst.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(doc["method"], "sessions");
    assert_eq!(doc["units"], 2);
    assert_eq!(doc["synthetic"]["requests"], 20);
    assert!(doc["synthetic"]["failed"].as_u64().unwrap() > 0);
}

#[test]
fn fit_reports_and_spreads_quantized_timestamps() {
    let dir = tempfile::tempdir().unwrap();
    let moon = dir.path().join("m.jsonl");
    let dst = dir.path().join("fit.jsonl");
    let out = support::run(&[
        "trace",
        "import",
        "--from",
        "mooncake",
        support::data("trace/mooncake_conv.jsonl").to_str().unwrap(),
        "-o",
        moon.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", support::stderr(&out));
    let out = support::run(&[
        "trace",
        "fit",
        moon.to_str().unwrap(),
        "--requests",
        "40",
        "-o",
        dst.to_str().unwrap(),
    ]);
    assert!(
        support::stdout(&out).contains("quantized into 3 s buckets"),
        "{}",
        support::stdout(&out)
    );
    assert!(support::stdout(&out).contains("--spread"));
    let doc = json_of(&support::run(&[
        "trace",
        "fit",
        moon.to_str().unwrap(),
        "--requests",
        "40",
        "--spread",
        "-o",
        dst.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(doc["quantization"]["bucket_s"], 3.0);
    assert_eq!(doc["spread"], true);
    assert!(doc["synthetic"]["quantization"].is_null());
}
