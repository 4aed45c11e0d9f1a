//! `shortlist analyze` and `shortlist hist merge`, driven through the real binary.

use std::io::Write as _;

use serde_json::Value;

use crate::support::{data, run, stderr, stdout};

fn json_of(args: &[&str]) -> (i32, Value) {
    let out = run(args);
    let code = out.status.code().unwrap_or(-1);
    let value = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {}", stdout(&out)));
    (code, value)
}

fn path(p: std::path::PathBuf) -> String {
    p.display().to_string()
}

#[test]
fn analyze_json_has_the_contract_keys_and_the_chapter_numbers() {
    let records = path(data("chapter-100.records.jsonl"));
    let slo = path(data("chat.slo.toml"));
    let (code, r) = json_of(&["analyze", &records, "--slo", &slo, "--json"]);
    assert_eq!(code, 0);
    assert_eq!(r["format"], "shortlist.report.v1");
    assert_eq!(r["loop"], "open");
    assert_eq!(r["window_s"], serde_json::json!([0.0, 12.5]));
    assert_eq!(r["requests"]["scheduled"], 100);
    assert_eq!(r["requests"]["completed"], 96);
    assert_eq!(r["requests"]["failed"], 4);
    assert_eq!(r["requests"]["qualified"], 81);
    assert_eq!(r["throughput"]["requests_per_s"], 7.68);
    assert_eq!(r["goodput"]["requests_per_s"], 6.48);
    assert_eq!(r["goodput"]["attainment"], 0.81);
    assert!(r["throughput"]["output_tokens_per_s"].is_number());
    assert!(r["goodput"]["output_tokens_per_s"].is_number());
    for metric in ["ttft", "itl", "worst_itl", "tpot", "e2e", "schedule_lag"] {
        let m = &r["latency"][metric];
        for key in ["population", "count", "p50", "p90", "p99"] {
            assert!(!m[key].is_null(), "latency.{metric}.{key} missing: {m}");
        }
    }
    // Seconds in JSON.
    assert_eq!(r["latency"]["ttft"]["p90"], 0.7);
    assert_eq!(r["checks"]["client_bound"], false);
    assert!(r["checks"]["littles_law"]["ok"].as_bool().unwrap());
}

#[test]
fn analyze_human_table_shows_populations() {
    let out = run(&[
        "analyze",
        &path(data("chapter-100.records.jsonl")),
        "--slo",
        &path(data("chat.slo.toml")),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(text.contains("open loop"), "{text}");
    assert!(text.contains("7.680 req/s completed"), "{text}");
    assert!(text.contains("6.480 req/s qualifying"), "{text}");
    assert!(
        text.contains("chunk gap c(j) − c(j−1), pooled over attempts"),
        "{text}"
    );
    assert!(
        text.contains("request attempt: first token − scheduled"),
        "{text}"
    );
}

#[test]
fn analyze_exits_1_when_the_attainment_target_is_missed() {
    let dir = tempfile::tempdir().unwrap();
    let slo = dir.path().join("strict.slo.toml");
    std::fs::write(&slo, "name = \"strict\"\nttft_ms = 600\nattainment = 0.9\n").unwrap();
    let out = run(&[
        "analyze",
        &path(data("chapter-100.records.jsonl")),
        "--slo",
        &path(slo),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains("(target 90.0 %)"));
}

/// Bad input: exit 2 and a message naming file, line and field.
#[test]
fn bad_records_name_file_line_and_field() {
    let header = r#"{"format": "shortlist.records.v1", "loop": "open", "window_s": [0, 10]}"#;
    let good = r#"{"id": "a", "scheduled_s": 0.0, "sent_s": 0.0, "chunks": [[0.2, 1]], "last_token_s": 0.2, "output_tokens": 1, "status": "ok"}"#;
    let cases: &[(&str, String, &str)] = &[
        (
            "malformed JSON",
            format!("{header}\n{good}\n{{\"id\": \"b\", \"scheduled_s\": \n"),
            ":3: field `scheduled_s`: EOF while parsing",
        ),
        (
            "unknown major version",
            format!("{}\n{good}\n", header.replace("records.v1", "records.v2")),
            ":1: field `format`: unknown major version",
        ),
        (
            "negative time",
            format!(
                "{header}\n{}\n",
                good.replace("\"scheduled_s\": 0.0", "\"scheduled_s\": -1.0")
            ),
            ":2: field `scheduled_s`",
        ),
        (
            "out-of-order chunks",
            format!(
                "{header}\n{}\n",
                good.replace("[[0.2, 1]]", "[[0.3, 1], [0.2, 1]]")
            ),
            ":2: field `chunks`: chunk 1 arrives at 0.2 s, before chunk 0",
        ),
        (
            "chunk after the last token",
            format!(
                "{header}\n{}\n",
                good.replace("[[0.2, 1]]", "[[0.2, 1], [0.5, 1]]")
            ),
            ":2: field `chunks`: a chunk arrives at 0.5 s, after the last token",
        ),
        (
            "wrong type",
            format!(
                "{header}\n{}\n",
                good.replace("\"output_tokens\": 1", "\"output_tokens\": \"one\"")
            ),
            ":2: field `output_tokens`",
        ),
        (
            "unknown status",
            format!("{header}\n{}\n", good.replace("\"ok\"", "\"fine\"")),
            ":2: field `status`",
        ),
        ("empty file", String::new(), ":1: field `format`"),
        (
            "first output token before the first chunk",
            format!(
                "{header}\n{}\n",
                good.replace(
                    "\"status\": \"ok\"",
                    "\"status\": \"ok\", \"first_output_s\": 0.1"
                )
            ),
            ":2: field `first_output_s`",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (name, text, expected) in cases {
        let file = dir.path().join("bad.records.jsonl");
        std::fs::File::create(&file)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = run(&["analyze", &path(file.clone())]);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("bad.records.jsonl"), "{name}: {err}");
        assert!(
            err.contains(expected),
            "{name}: expected `{expected}` in: {err}"
        );
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
}

/// A reasoning model streams reasoning tokens first: TTFT counts them, time to first output
/// token does not, and the report shows both with their populations.
#[test]
fn time_to_first_output_token_is_reported_beside_ttft() {
    let header = r#"{"format": "shortlist.records.v1", "loop": "open", "window_s": [0, 10]}"#;
    let mut text = format!("{header}\n");
    for i in 0..4 {
        let s = f64::from(i);
        text.push_str(&format!(
            "{{\"id\": \"r{i}\", \"scheduled_s\": {s}, \"sent_s\": {s}, \"chunks\": [[{}, 3], [{}, 1], [{}, 1]], \"last_token_s\": {}, \"first_output_s\": {}, \"output_tokens\": 5, \"status\": \"ok\"}}\n",
            s + 0.1,
            s + 0.6,
            s + 0.7,
            s + 0.7,
            s + 0.6
        ));
    }
    // A record without the field (a target that cannot tell the two apart) is no sample.
    text.push_str(r#"{"id": "plain", "scheduled_s": 5.0, "sent_s": 5.0, "chunks": [[5.2, 1]], "last_token_s": 5.2, "output_tokens": 1, "status": "ok"}"#);
    text.push('\n');
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("reasoning.records.jsonl");
    std::fs::write(&file, text).unwrap();
    let (code, v) = json_of(&["analyze", &path(file.clone()), "--json"]);
    assert_eq!(code, 0);
    let ttft = &v["latency"]["ttft"];
    let ttfot = &v["latency"]["ttfot"];
    assert_eq!(ttft["count"], 5);
    assert_eq!(ttfot["count"], 4);
    assert!((ttft["p50"].as_f64().unwrap() - 0.1).abs() < 1e-9, "{ttft}");
    assert!(
        (ttfot["p50"].as_f64().unwrap() - 0.6).abs() < 1e-9,
        "{ttfot}"
    );
    assert!(
        ttfot["population"]
            .as_str()
            .unwrap()
            .contains("not reasoning")
    );
    let out = run(&["analyze", &path(file)]);
    assert!(stdout(&out).contains("first_output"), "{}", stdout(&out));
}

#[test]
fn unknown_slo_keys_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let slo = dir.path().join("typo.slo.toml");
    std::fs::write(&slo, "name = \"chat\"\nttft_ms = 600\nmax_itl = 150\n").unwrap();
    let out = run(&[
        "analyze",
        &path(data("chapter-100.records.jsonl")),
        "--slo",
        &path(slo),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("typo.slo.toml:3: field `max_itl`"), "{err}");
}

#[test]
fn hist_merge_of_the_chapter_hosts() {
    let (code, m) = json_of(&[
        "hist",
        "merge",
        &path(data("hist/host-a.hist.json")),
        &path(data("hist/host-b.hist.json")),
        "--quantiles",
        "0.5,0.99",
        "--json",
    ]);
    assert_eq!(code, 0);
    assert_eq!(m["format"], "shortlist.histogram.v1");
    assert_eq!(m["counts"], serde_json::json!([185, 11, 3, 1]));
    assert_eq!(m["total"], 200);
    assert_eq!(
        m["edges"],
        serde_json::json!([100.0, 200.0, 400.0, 800.0, null])
    );
    assert_eq!(
        m["quantiles"],
        serde_json::json!([{"q": 0.5, "lo": 100.0, "hi": 200.0}, {"q": 0.99, "lo": 400.0, "hi": 800.0}])
    );
}

#[test]
fn hist_merge_refuses_mismatched_edges() {
    let out = run(&[
        "hist",
        "merge",
        &path(data("hist/host-a.hist.json")),
        &path(data("hist/host-c-other-edges.hist.json")),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("back to the raw samples"), "{err}");
    assert!(err.contains("edge 1: 200 vs 250"), "{err}");
}

#[test]
fn hist_merge_reads_prometheus_scrapes() {
    let (code, m) = json_of(&[
        "hist",
        "merge",
        &path(data("hist/vllm-a.prom")),
        &path(data("hist/vllm-b.prom")),
        "--metric",
        "vllm:time_to_first_token_seconds",
        "--json",
    ]);
    assert_eq!(code, 0);
    assert_eq!(m["counts"], serde_json::json!([10, 65, 100, 20, 5]));
    assert_eq!(m["unit"], "s");
    assert_eq!(m["upper_inclusive"], true);
    // 200 observations, cumulative 10/75/175/195/200: p90 (the 180th) is in (0.5, 1.0], p99 (the
    // 198th) beyond the last finite bound.
    assert_eq!(
        m["quantiles"][1],
        serde_json::json!({"q": 0.9, "lo": 0.5, "hi": 1.0})
    );
    assert_eq!(
        m["quantiles"][2],
        serde_json::json!({"q": 0.99, "lo": 1.0, "hi": null})
    );
    // Without --metric, a file with two histograms is ambiguous.
    let out = run(&["hist", "merge", &path(data("hist/vllm-a.prom"))]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("choose one with --metric"));
}

/// HDR histograms written by one analysis merge exactly with another's.
#[test]
fn hdr_histograms_from_analyze_merge_across_runs() {
    let dir = tempfile::tempdir().unwrap();
    let records = path(data("chapter-100.records.jsonl"));
    for host in ["a", "b"] {
        let out_dir = path(dir.path().join(host));
        let out = run(&[
            "analyze",
            &records,
            "--hdr-dir",
            &out_dir,
            "--host",
            host,
            "--json",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let (code, m) = json_of(&[
        "hist",
        "merge",
        &path(dir.path().join("a/ttft.hdr.json")),
        &path(dir.path().join("b/ttft.hdr.json")),
        "--json",
    ]);
    assert_eq!(code, 0);
    assert_eq!(m["format"], "shortlist.hdr.v1");
    assert_eq!(m["total"], 192);
    assert_eq!(m["host"], "a+b");
    // p90 of TTFT is 700 ms: the HDR bucket holding it is reported as a range around it.
    let p90 = &m["quantiles"][1];
    assert!(
        p90["lo"].as_f64().unwrap() <= 0.7 && 0.7 < p90["hi"].as_f64().unwrap(),
        "{p90}"
    );
    // HDR and explicit buckets never mix.
    let out = run(&[
        "hist",
        "merge",
        &path(dir.path().join("a/ttft.hdr.json")),
        &path(data("hist/host-a.hist.json")),
    ]);
    assert_eq!(out.status.code(), Some(2));
}
