//! Verdicts a user can trust, through the binary: an error outside the model is not a failure
//! (and is not cached as done), a dead target is unreachable and not a slow client, client-bound
//! needs enough samples, no command writes over its input, a study that cannot run is refused
//! when created, a closed pipe is not a panic, and the docs a newcomer needs are in the
//! repository. Each asserts on exit codes and `--json`.

use std::path::Path;
use std::process::{Output, Stdio};

use serde_json::Value;

use crate::support::{Mock, data, repo_root, run, shortlist, stderr, stdout};

fn json_of(out: &Output) -> Value {
    serde_json::from_str(&stdout(out))
        .unwrap_or_else(|e| panic!("{e}: {} / {}", stdout(out), stderr(out)))
}

/// A port with nothing listening on it (bound, then released).
fn dead_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A small trace: `n` requests at `rate` req/s.
fn trace(dir: &Path, n: usize, rate: f64) -> std::path::PathBuf {
    let path = dir.join("t.trace.jsonl");
    let mut text =
        String::from("{\"format\":\"shortlist.trace.v1\",\"name\":\"t\",\"mode\":\"online\"}\n");
    for i in 0..n {
        text.push_str(&format!(
            "{{\"id\":\"r{i}\",\"t\":{},\"input_tokens\":8,\"output_tokens\":4}}\n",
            i as f64 / rate
        ));
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// Item 1: `--max-tokens 0` is refused up front; an HTTP error is an error, not a failed case,
/// and a rerun asks it again instead of reading it from the progress file.
#[test]
fn an_http_error_is_not_a_failure_and_is_not_cached() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let set = data("study/mini.yaml");
    let out = run(&[
        "eval",
        "run",
        "--evalset",
        set.to_str().unwrap(),
        "--candidate",
        "http://127.0.0.1:9#m",
        "--max-tokens",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    // Every case answered with HTTP 400 by the endpoint.
    let answers = d.join("refuse.jsonl");
    std::fs::write(
        &answers,
        "{\"match\": \"?\", \"status\": 400, \"error\": \"max_tokens must be at least 1\"}\n\
         {\"match\": \".\", \"status\": 400, \"error\": \"max_tokens must be at least 1\"}\n",
    )
    .unwrap();
    let mock = Mock::start(&["--answers", answers.to_str().unwrap()]);
    let results = d.join("r.json");
    let eval = |mock: &Mock| {
        shortlist()
            .current_dir(d)
            .args([
                "eval",
                "run",
                "--evalset",
                set.to_str().unwrap(),
                "--candidate",
                &format!("{}#m", mock.url),
                "-o",
                results.to_str().unwrap(),
                "--json",
            ])
            .output()
            .unwrap()
    };
    let out = eval(&mock);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let doc = json_of(&out);
    assert_eq!(doc["errors"].as_array().unwrap().len(), 6, "{doc}");
    assert_eq!(
        doc["overall"]["pass_rate"]["n"], 0,
        "no error was scored: {doc}"
    );
    assert!(
        doc["errors"][0]["error"]
            .as_str()
            .unwrap()
            .contains("HTTP 400")
    );
    let addr = mock.url.trim_start_matches("http://").to_owned();
    drop(mock);

    // The endpoint fixed (at the same address): the rerun asks every case again and scores it.
    let good = Mock::start_at(
        &addr,
        &[
            "--answers",
            data("study/mini.answers.jsonl").to_str().unwrap(),
        ],
    );
    let out = eval(&good);
    let doc = json_of(&out);
    assert!(doc.get("errors").is_none(), "{doc}");
    assert_eq!(doc["overall"]["pass_rate"]["n"], 6, "{doc}");
    assert_eq!(doc["overall"]["pass_rate"]["passed"], 5, "{doc}");
}

/// Item 2: a dead target is unreachable (exit 1, the first error named), never client-bound;
/// `mock calibrate` against a dead target says so and exits 1.
#[test]
fn a_dead_target_is_unreachable_not_a_slow_client() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path(), 20, 20.0);
    let records = dir.path().join("b.records.jsonl");
    let target = format!("http://127.0.0.1:{}", dead_port());
    let out = run(&[
        "bench",
        "--target",
        &target,
        "--trace",
        t.to_str().unwrap(),
        "-o",
        records.to_str().unwrap(),
        "--no-calibrate",
        "--json",
        "--quiet",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = json_of(&out);
    assert_eq!(report["checks"]["client_bound"], false, "{report}");
    let unreachable = &report["checks"]["unreachable"];
    assert_eq!(unreachable["failed"], 20);
    assert!(
        unreachable["first_error"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("refused"),
        "{unreachable}"
    );
    let out = run(&[
        "mock",
        "calibrate",
        "--target",
        &target,
        "--start-rps",
        "100",
        "--max-rps",
        "100",
        "--step-s",
        "0.2",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

/// Item 3: three requests at 1 req/s are not client-bound whatever their lag: a p99 of three
/// samples is their maximum, so only the sent rate is judged; the calibration does not refuse a
/// trace it only failed far above.
#[test]
fn client_bound_needs_enough_samples() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path(), 3, 1.0);
    let mock = Mock::start(&[]);
    for calibrate in [false, true] {
        let records = dir.path().join(format!("b{calibrate}.records.jsonl"));
        let mut args = vec![
            "bench",
            "--target",
            &mock.url,
            "--trace",
            t.to_str().unwrap(),
            "-o",
            records.to_str().unwrap(),
            "--json",
            "--quiet",
        ];
        if !calibrate {
            args.push("--no-calibrate");
        }
        let out = run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let detail = &json_of(&out)["checks"]["client_bound_detail"];
        assert_eq!(detail["lag_judged"], false, "{detail}");
        assert_eq!(detail["samples"], 3);
        assert_eq!(detail["min_samples"], 100);
        assert!(
            (detail["threshold_s"].as_f64().unwrap() - 0.01).abs() < 1e-9,
            "{detail}"
        );
    }
}

/// Item 4: no command writes over one of its inputs.
#[test]
fn no_command_destroys_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path(), 3, 1.0);
    let before = std::fs::read(&t).unwrap();
    let out = run(&[
        "bench",
        "--target",
        "http://127.0.0.1:9",
        "--trace",
        t.to_str().unwrap(),
        "-o",
        t.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(std::fs::read(&t).unwrap(), before, "the trace is intact");

    let csv = dir.path().join("azure.csv");
    std::fs::write(
        &csv,
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n",
    )
    .unwrap();
    let before = std::fs::read(&csv).unwrap();
    // The same file under another spelling of its path.
    let other = dir.path().join(".").join("azure.csv");
    let out = run(&[
        "trace",
        "import",
        "--from",
        "azure",
        csv.to_str().unwrap(),
        "-o",
        other.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(std::fs::read(&csv).unwrap(), before);
}

/// Item 5: a study that cannot run does not even store: negative and zero rates, zero requests,
/// each named with its line and field; paths are read relative to the study file.
#[test]
fn a_study_that_cannot_run_is_refused_when_created() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let set_path = data("study/mini.yaml");
    let yaml = std::fs::read_to_string(&set_path).unwrap();
    std::fs::write(d.join("mini.yaml"), &yaml).unwrap();
    let set = shortlist_evals::EvalSet::from_yaml("mini.yaml", &yaml).unwrap();
    let good = std::fs::read_to_string(data("study/mini.study.toml"))
        .unwrap()
        .replace("@EVALSET@", "mini.yaml")
        .replace("@SHA256@", set.sha256())
        .replace("@SOURCE@", "http://127.0.0.1:9#m");
    let studies = d.join("studies");
    std::fs::create_dir_all(&studies).unwrap();
    let url = format!("sqlite://{}?mode=rwc", d.join("s.db").display());
    let create = |text: String, cwd: &Path| {
        let path = d.join("s.study.toml");
        std::fs::write(&path, text).unwrap();
        shortlist()
            .env("DATABASE_URL", &url)
            .current_dir(cwd)
            .args(["study", "create", path.to_str().unwrap(), "--json"])
            .output()
            .unwrap()
    };
    for (from, to, field) in [
        ("rate_rps = 0.5", "rate_rps = -0.5", "workload.rate_rps"),
        ("rate_rps = 0.5", "rate_rps = 0", "workload.rate_rps"),
        ("requests = 8", "requests = 0", "workload.requests"),
    ] {
        let out = create(good.replace(from, to), d);
        assert_eq!(out.status.code(), Some(2), "{to}: {}", stderr(&out));
        let message = stderr(&out);
        assert!(
            message.contains(":6:") && message.contains(field),
            "{to}: {message}"
        );
    }
    let out = shortlist()
        .env("DATABASE_URL", &url)
        .current_dir(d)
        .args(["study", "show", "mini", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "nothing was stored: {}",
        stderr(&out)
    );
    // The eval set is found beside the study file, whatever the working folder.
    let out = create(good, &studies);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json_of(&out)["state"], "saved");
}

/// Item 6: a closed pipe ends the program quietly.
#[test]
fn a_closed_pipe_is_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path(), 3, 1.0);
    let mut child = shortlist()
        .args(["trace", "stats", t.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Close the reading end before the program writes.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{err}"
    );
    use std::os::unix::process::ExitStatusExt as _;
    assert!(
        out.status.code() == Some(0) || out.status.signal() == Some(13),
        "{:?}",
        out.status
    );
}

/// Item 8: the docs a newcomer follows are in the repository, and every environment variable
/// the code reads is in the README.
#[test]
fn the_docs_are_self_contained() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    for doc in ["docs/metrics.md", "docs/formats.md", "docs/models.md"] {
        assert!(root.join(doc).exists(), "{doc} is missing");
        assert!(readme.contains(doc), "the README does not link {doc}");
    }
    let mut vars = std::collections::BTreeSet::new();
    for dir in ["crates", "server/src"] {
        let out = std::process::Command::new("grep")
            .args(["-rhoE", "env::var(_os)?\\(\"[A-Z_]+\"", dir])
            .current_dir(&root)
            .output()
            .unwrap();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some(name) = line.split('"').nth(1) {
                vars.insert(name.to_owned());
            }
        }
    }
    assert!(vars.contains("DATABASE_URL"), "{vars:?}");
    for var in &vars {
        assert!(
            readme.contains(var.as_str()),
            "{var} is read but not in the README"
        );
    }
    let help = stdout(&run(&["study", "--help"]));
    assert!(help.contains("DATABASE_URL"), "{help}");
}
