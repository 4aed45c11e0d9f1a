//! A product's own traffic as a study's workload: a trace stored in the database — from the
//! command line (`shortlist trace store|list|export|remove`) and the workbench's `/workloads`
//! page and API, a public format converted on the way — found by the SHA-256 a study pins when
//! its path is not a file, chosen in the guided form, replayed by the load run, and kept while a
//! study pins it.

use std::path::Path;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use shortlist_study::study::{Study, WorkloadKind};

use crate::support::{
    Mock, data, in_dir as sl, json_in_dir as ok_json, refused_in_dir as refused, stderr,
};
use crate::web::{Server, form, http, multipart, status_when_done};

/// Six requests over 2.5 s in Azure's public format.
const AZURE: &str = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
    2023-11-16 18:15:46.0000000,120,8\n\
    2023-11-16 18:15:46.5000000,90,12\n\
    2023-11-16 18:15:47.0000000,200,6\n\
    2023-11-16 18:15:47.2500000,60,10\n\
    2023-11-16 18:15:48.0000000,150,8\n\
    2023-11-16 18:15:48.5000000,80,9\n";

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The mini study's file in `dir`, its workload the trace `path` pinned by `sha`.
fn trace_study(dir: &Path, path: &str, sha: &str) -> String {
    let yaml = std::fs::read_to_string(data("study/mini.yaml")).unwrap();
    std::fs::write(dir.join("mini.yaml"), &yaml).unwrap();
    let set = shortlist_evals::EvalSet::from_yaml("mini.yaml", &yaml).unwrap();
    let text = std::fs::read_to_string(data("study/mini.study.toml"))
        .unwrap()
        .replace("@EVALSET@", "mini.yaml")
        .replace("@SHA256@", set.sha256())
        .replace("@SOURCE@", "http://127.0.0.1:9#nothing")
        .replace(
            "workload = { kind = \"uniform\", requests = 8, input_tokens = 800, output_tokens = 128, rate_rps = 0.5, seed = 7 }",
            &format!("workload = {{ kind = \"trace\", path = \"{path}\", sha256 = \"{sha}\" }}"),
        );
    assert!(
        text.contains("kind = \"trace\""),
        "the mini study's workload line changed"
    );
    let study = dir.join("replay.study.toml");
    std::fs::write(&study, text).unwrap();
    study.display().to_string()
}

#[test]
fn traces_are_stored_found_by_hash_and_kept_while_pinned_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A trace of ours, stored byte for byte under the name in its header.
    let synth = d.join("bursts.trace.jsonl");
    let out = sl(
        d,
        &[
            "trace",
            "synth",
            "--shape",
            "bursts",
            "--requests",
            "12",
            "--input-tokens",
            "1200",
            "--output-tokens",
            "120",
            "--rate",
            "4",
            "-o",
            synth.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let bytes = std::fs::read(&synth).unwrap();
    let sha = sha256(&bytes);
    let v1 = ok_json(d, &["trace", "store", synth.to_str().unwrap(), "--json"]);
    assert_eq!(
        (
            &v1["version"],
            &v1["inserted"],
            &v1["sha256"],
            &v1["format"]
        ),
        (&json!(1), &json!(true), &json!(sha), &json!("shortlist"))
    );
    assert_eq!(v1["stats"]["requests"], json!(12));
    let name = v1["name"].as_str().unwrap().to_owned();
    let again = ok_json(d, &["trace", "store", synth.to_str().unwrap(), "--json"]);
    assert_eq!(
        (&again["version"], &again["inserted"]),
        (&json!(1), &json!(false))
    );

    // A public trace is converted, and needs a name; a bad row is named with its line.
    let azure = d.join("azure.csv");
    std::fs::write(&azure, AZURE).unwrap();
    let why = refused(
        d,
        &["trace", "store", azure.to_str().unwrap(), "--from", "azure"],
    );
    assert!(why.contains("name"), "{why}");
    let prod = ok_json(
        d,
        &[
            "trace",
            "store",
            azure.to_str().unwrap(),
            "--from",
            "azure",
            "--name",
            "prod",
            "--json",
        ],
    );
    assert_eq!(
        (&prod["name"], &prod["format"]),
        (&json!("prod"), &json!("azure"))
    );
    assert_eq!(prod["stats"]["requests"], json!(6));
    assert_eq!(prod["stats"]["output_tokens"], json!(53));
    let broken = d.join("broken.csv");
    std::fs::write(&broken, AZURE.replace("18:15:47.0000000", "not a time")).unwrap();
    let why = refused(
        d,
        &[
            "trace",
            "store",
            broken.to_str().unwrap(),
            "--from",
            "azure",
            "--name",
            "prod",
        ],
    );
    assert!(why.contains("broken.csv:4: field `TIMESTAMP`"), "{why}");

    let list = ok_json(d, &["trace", "list", "--json"]);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{list}");
    assert!(
        names.contains(&"prod") && names.contains(&name.as_str()),
        "{list}"
    );
    // Exported, a version is the same bytes as stored.
    let exported = d.join("exported.jsonl");
    let out = sl(
        d,
        &["trace", "export", &name, "-o", exported.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(std::fs::read(&exported).unwrap(), bytes);

    // A study whose trace is not a file beside it finds the stored one by its hash.
    let study = trace_study(d, "traces/gone.trace.jsonl", &sha);
    let created = ok_json(d, &["study", "create", &study, "--json"]);
    assert_eq!(created["version"], json!(1), "{created}");
    let unknown = trace_study(d, "traces/gone.trace.jsonl", &"0".repeat(64));
    let why = refused(d, &["study", "create", &unknown]);
    assert!(why.contains("found by its sha256"), "{why}");

    // Pinned by a study (a draft included), the trace is kept; the study is named.
    let why = refused(d, &["trace", "remove", &name]);
    assert!(why.contains("study `mini` v1 (draft) pins it"), "{why}");
    let out = sl(d, &["study", "delete", "mini"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let gone = ok_json(d, &["trace", "remove", &name, "--json"]);
    assert_eq!(
        gone,
        json!({"name": name, "version": 1, "sha256": sha, "remaining": null})
    );
}

#[test]
fn a_trace_uploaded_in_the_workbench_is_chosen_in_the_form_and_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mock = Mock::start(&[
        "--answers",
        data("study/mini.answers.jsonl").to_str().unwrap(),
    ]);
    let server = Server::start(d, &["--workers", "1", "--schedule-every", "0"], &[]);
    let a = server.addr.as_str();

    let empty = http(a, "GET", "/workloads", &[], b"");
    assert_eq!(empty.status, 200);
    assert!(
        empty.body.contains("No trace is stored yet"),
        "{}",
        empty.body
    );

    // Preview through the API: converted and described, nothing stored.
    let csv = [("content-type", "text/csv")];
    let preview = http(
        a,
        "POST",
        "/api/workloads?format=azure&name=prod",
        &csv,
        AZURE.as_bytes(),
    );
    assert_eq!(preview.status, 200, "{}", preview.body);
    let p = preview.json();
    assert_eq!(
        (&p["stored"], &p["facts"]["stats"]["requests"]),
        (&Value::Null, &json!(6))
    );
    assert_eq!(
        p["facts"]["arrivals"]["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .sum::<u64>(),
        6
    );
    assert_eq!(http(a, "GET", "/api/workloads", &[], b"").json(), json!([]));
    let bad = http(
        a,
        "POST",
        "/api/workloads?format=mooncake&name=prod",
        &csv,
        AZURE.as_bytes(),
    );
    assert_eq!(bad.status, 400, "{}", bad.body);

    // Stored from the page's form (a file upload); then the page shows it with its picture.
    let (ct, body) = multipart(&[
        ("format", "azure"),
        ("name", "prod"),
        ("file", AZURE),
        ("action", "store"),
    ]);
    let stored = http(
        a,
        "POST",
        "/workloads",
        &[("content-type", ct.as_str())],
        &body,
    );
    assert_eq!(stored.status, 200, "{}", stored.body);
    assert!(
        stored.body.contains("Stored as prod v1."),
        "{}",
        stored.body
    );
    let list = http(a, "GET", "/api/workloads", &[], b"").json();
    let sha = list[0]["versions"][0]["sha256"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(sha, p["sha256"].as_str().unwrap());
    let page = http(a, "GET", "/workloads", &[], b"").body;
    assert!(page.contains(r#"id="trace-prod-v1""#), "{page}");
    assert!(
        page.contains(r#"data-chart="arrivals""#) && page.contains("<svg"),
        "{page}"
    );
    let use_href = format!("/studies/new?workload=trace:{sha}");
    assert!(
        page.contains(&format!(r#"href="{use_href}#f-workload""#)),
        "{page}"
    );
    // Downloaded, it is the bytes whose hash a study pins.
    let file = http(a, "GET", "/workloads/prod/trace.jsonl", &[], b"");
    assert_eq!(file.status, 200);
    assert_eq!(sha256(file.body.as_bytes()), sha);

    // An eval set and the mock as the candidate, then a study on the trace from the form.
    let yaml = std::fs::read_to_string(data("study/mini.yaml")).unwrap();
    let set = http(
        a,
        "POST",
        "/api/evalsets/import?format=shortlist&name=study-mini&store=true",
        &[("content-type", "text/plain")],
        yaml.as_bytes(),
    )
    .json();
    let set_sha = set["sha256"].as_str().unwrap().to_owned();
    let endpoint = format!("{}#mock", mock.url);
    let registered = http(
        a,
        "POST",
        "/api/candidates",
        &[("content-type", "application/json")],
        json!({"name": "smol", "source": endpoint})
            .to_string()
            .as_bytes(),
    );
    assert!(registered.status < 300, "{}", registered.body);
    let chosen = http(a, "GET", &use_href, &[], b"").body;
    assert!(
        chosen.contains(&format!(r#"<option value="trace:{sha}" selected"#)),
        "{chosen}"
    );
    let workload = format!("trace:{sha}");
    let fields = [
        ("name", "replay"),
        (
            "question",
            "Does the smallest model hold the SLO under our own traffic?",
        ),
        ("evalset", set_sha.as_str()),
        ("candidate", "smol"),
        ("workload", workload.as_str()),
        // Unused for a trace, as a person may leave them.
        ("requests", "40"),
        ("prompt_tokens", "400"),
        ("output_tokens", "64"),
        ("seed", "1"),
        // The practice rate, left at its default, is not the trace's: blank replay rate, its own.
        ("rate_rps", "0.25"),
        ("replay_rps", ""),
        ("slo_name", "interactive"),
        ("ttft_ms", "2000"),
        ("max_itl_ms", "500"),
        ("ordinary_rps", "1"),
        ("peak_rps", "2"),
        ("attainment_target", "0.9"),
        ("context_tokens", "2048"),
        ("concurrency", "4"),
        ("device", "cpu"),
        ("device_memory_gib", "8"),
        ("currency", "USD"),
        ("rule.0.metric", "high_value_failures"),
        ("rule.0.op", ">"),
        ("rule.0.value", "0"),
    ];
    let send = |action: &str| {
        let mut all = fields.to_vec();
        all.push(("action", action));
        http(
            a,
            "POST",
            "/studies/new",
            &[("content-type", "application/x-www-form-urlencoded")],
            &form(&all),
        )
    };
    let saved = send("save");
    assert_eq!(saved.status, 303, "{}", saved.body);
    let shown = http(a, "GET", "/api/studies/replay", &[], b"").json();
    let study = Study::from_file(
        "stored",
        serde_json::from_value(shown["study"].clone()).unwrap(),
    )
    .unwrap();
    let w = &study.file().workload;
    assert_eq!(
        (
            w.kind,
            w.sha256.as_deref(),
            w.path.as_deref(),
            w.rate_rps,
            w.requests
        ),
        (
            WorkloadKind::Trace,
            Some(sha.as_str()),
            Some("prod.trace.jsonl"),
            None,
            None
        )
    );

    // The study pins the stored trace itself: no copy of it is stored beside.
    let traces = http(a, "GET", "/api/workloads", &[], b"").json();
    assert_eq!(traces.as_array().map(Vec::len), Some(1), "{traces}");

    // Pinned, the trace stays; the refusal names the study.
    let kept = http(a, "DELETE", "/api/workloads/prod", &[], b"");
    assert_eq!(kept.status, 400, "{}", kept.body);
    assert!(
        kept.body.contains("study `replay` v1 (draft) pins it"),
        "{}",
        kept.body
    );
    let page = http(a, "GET", "/workloads", &[], b"").body;
    assert!(
        !page.contains(r#"action="/workloads/prod/remove""#),
        "{page}"
    );

    // Locked and run: the load run replays the stored trace, and the record names it.
    assert_eq!(
        http(a, "POST", "/api/studies/replay/lock", &[], b"").status,
        200
    );
    let run = http(a, "POST", "/api/studies/replay/runs", &[], b"");
    assert!(run.status < 300, "{}", run.body);
    let status = status_when_done(a, "/api/studies/replay/status");
    assert_eq!(status["state"], "done", "{status}");
    let record = http(
        a,
        "GET",
        "/api/studies/replay/candidates/smol/record",
        &[],
        b"",
    )
    .json();
    let perf = &record["performance"];
    assert_eq!(
        perf["workload"],
        json!(format!("trace prod.trace.jsonl (sha256 {})", &sha[..12])),
        "{record}"
    );
    assert_eq!(perf["target_counts"]["scheduled"], json!(6), "{record}");
}

/// A trace of ours with `requests` requests, some 90 bytes each.
pub(crate) fn trace_of(requests: usize) -> String {
    let mut text = format!(
        "{{\"format\":\"shortlist.trace.v1\",\"name\":\"day\",\"mode\":\"online\",\"duration_s\":{requests}.0}}\n"
    );
    for i in 0..requests {
        text.push_str(&format!(
            "{{\"id\":\"r{i}\",\"t\":{i}.25,\"input_tokens\":{},\"output_tokens\":{},\"modality\":\"text\"}}\n",
            100 + i % 50,
            10 + i % 7
        ));
    }
    text
}

#[test]
fn an_upload_past_its_limit_is_refused_naming_the_limit_and_the_way_round_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &[
            "--workers",
            "0",
            "--schedule-every",
            "0",
            "--max-upload-bytes",
            "100000",
            "--max-trace-bytes",
            "400000",
        ],
        &[],
    );
    let a = server.addr.as_str();
    let (day, week) = (trace_of(2_000), trace_of(5_000));
    assert!((100_000..400_000).contains(&day.len()) && week.len() > 400_000);
    let plain = [("content-type", "text/plain")];

    // A trace over the other bodies' limit but within its own is taken, through the API and
    // the page's form alike.
    let preview = http(a, "POST", "/api/workloads", &plain, day.as_bytes());
    assert_eq!(preview.status, 200, "{}", preview.body);
    assert_eq!(preview.json()["facts"]["stats"]["requests"], 2_000);
    let (ct, body) = multipart(&[("format", "shortlist"), ("file", &day), ("action", "store")]);
    let stored = http(a, "POST", "/workloads", &[("content-type", &ct)], &body);
    assert_eq!(stored.status, 200, "{}", stored.body);
    assert_eq!(
        http(a, "GET", "/api/workloads", &[], b"").json()[0]["versions"][0]["facts"]["stats"]["requests"],
        2_000
    );

    // Past it: the API's error document and the page with its form, each naming the limit, the
    // option that sets it and the command that stores any size; nothing stored.
    let refused = http(a, "POST", "/api/workloads", &plain, week.as_bytes());
    assert_eq!(refused.status, 413, "{}", refused.body);
    let e = refused.json();
    assert_eq!(
        (&e["error"]["status"], &e["error"]["class"]),
        (&json!(413), &json!("too_large"))
    );
    let message = e["error"]["message"].as_str().unwrap();
    for named in ["400000 bytes", "--max-trace-bytes", "shortlist trace store"] {
        assert!(message.contains(named), "{named}: {message}");
    }
    let (ct, body) = multipart(&[
        ("format", "shortlist"),
        ("file", &week),
        ("action", "store"),
    ]);
    let page = http(a, "POST", "/workloads", &[("content-type", &ct)], &body);
    assert_eq!(page.status, 413, "{}", page.body);
    assert!(
        page.body.contains(r#"action="/workloads""#),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("--max-trace-bytes BYTES</code>"),
        "{}",
        page.body
    );
    assert_eq!(
        http(a, "GET", "/api/workloads", &[], b"").json()[0]["versions"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // The form says its limit before anything is sent (the page's script refuses a larger file).
    let form_page = http(a, "GET", "/workloads", &[], b"").body;
    assert!(
        form_page.contains(r#"data-max-bytes="400000""#),
        "{form_page}"
    );

    // Any other body is held to `--max-upload-bytes`: an eval set through the API and the
    // import form, a study, a urlencoded form.
    let refused = http(
        a,
        "POST",
        "/api/evalsets/import?format=shortlist&name=big",
        &plain,
        day.as_bytes(),
    );
    assert_eq!(refused.status, 413, "{}", refused.body);
    let message = refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    for named in ["100000 bytes", "--max-upload-bytes", "shortlist eval store"] {
        assert!(message.contains(named), "{named}: {message}");
    }
    let (ct, body) = multipart(&[
        ("format", "shortlist"),
        ("file", &day),
        ("action", "preview"),
    ]);
    let page = http(
        a,
        "POST",
        "/evalsets/import",
        &[("content-type", &ct)],
        &body,
    );
    assert_eq!(page.status, 413, "{}", page.body);
    assert!(
        page.body.contains(r#"action="/evalsets/import""#),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("--max-upload-bytes BYTES</code>"),
        "{}",
        page.body
    );
    let import_form = http(a, "GET", "/evalsets/import", &[], b"").body;
    assert!(
        import_form.contains(r#"data-max-bytes="100000""#),
        "{import_form}"
    );
    let refused = http(a, "POST", "/api/studies", &plain, day.as_bytes());
    assert_eq!(refused.status, 413, "{}", refused.body);
    assert_eq!(refused.json()["error"]["class"], "too_large");
    let long = format!("name=nightly&study={}", "x".repeat(120_000));
    let form_refused = http(
        a,
        "POST",
        "/schedules",
        &[("content-type", "application/x-www-form-urlencoded")],
        long.as_bytes(),
    );
    assert_eq!(form_refused.status, 413, "{}", form_refused.body);
    assert!(
        form_refused
            .body
            .contains("--max-upload-bytes BYTES</code>"),
        "{}",
        form_refused.body
    );
    assert_eq!(http(a, "GET", "/healthz", &[], b"").status, 200);
}
