//! `shortlist bench`, `capacity` and `mock serve`, driven through the real binary: the simulated
//! target on virtual time (practice traces, thermostat, sweeps), the HTTP target against the mock
//! on loopback (bounded and self-stopping), bad targets and bad input.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;
use shortlist_workload::synth::{Shape, SynthSpec, synthesize};

use crate::support::{Mock, data, run, shortlist, stderr, stdout};

const SIM: &str = "sim:max_batch=32,prefill_tps=50000,prefill_overhead_ms=5,decode_ms=5,decode_per_seq_ms=0.2,cache_tokens=50000";

fn practice_trace(dir: &Path, shape: Shape) -> PathBuf {
    let (header, requests) = synthesize(&SynthSpec::practice(shape), 1).unwrap();
    let path = dir.join(format!("{}.trace.jsonl", shape.name()));
    let file = std::fs::File::create(&path).unwrap();
    shortlist_workload::trace::write_all(file, &header, &requests, "practice").unwrap();
    path
}

/// A trace of `n` requests evenly spaced at `rate` req/s, `tokens` in and out each, in `dir`.
fn even_trace(dir: &Path, name: &str, n: usize, rate: f64, tokens: u32) -> PathBuf {
    let mut text = format!(
        "{{\"format\":\"shortlist.trace.v1\",\"name\":\"{name}\",\"mode\":\"online\",\"duration_s\":{}}}\n",
        n as f64 / rate
    );
    for i in 0..n {
        text.push_str(&format!(
            "{{\"id\":\"r{i}\",\"t\":{},\"input_tokens\":{tokens},\"output_tokens\":{tokens}}}\n",
            i as f64 / rate
        ));
    }
    let path = dir.join(format!("{name}.trace.jsonl"));
    std::fs::write(&path, text).unwrap();
    path
}

fn json(out: &std::process::Output) -> Value {
    serde_json::from_str(&stdout(out))
        .unwrap_or_else(|e| panic!("{e}: stdout {} stderr {}", stdout(out), stderr(out)))
}

fn bench(args: &[&str]) -> std::process::Output {
    let mut all = vec!["bench", "--quiet"];
    all.extend_from_slice(args);
    run(&all)
}

#[test]
fn bench_against_the_mock_records_every_request() {
    let mock = Mock::start(&["--tokens", "8", "--ttft-ms", "5", "--itl-ms", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("run.records.jsonl");
    let trace = data("loadgen/small.trace.jsonl");
    let slo = data("loadgen/chat.slo.toml");
    let out = bench(&[
        "--target",
        &mock.url,
        "--trace",
        trace.to_str().unwrap(),
        "--slo",
        slo.to_str().unwrap(),
        "-o",
        records.to_str().unwrap(),
        "--model",
        "mock",
        "--json",
        "--allow-client-bound",
    ]);
    let report = json(&out);
    // A busy test host may fail the self-calibration; the run then goes ahead flagged (exit 1).
    let text = std::fs::read_to_string(&records).unwrap();
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let flagged = header["client_bound_by_calibration"].as_bool().unwrap();
    let expected_exit = if flagged || report["checks"]["client_bound"] == true {
        1
    } else {
        0
    };
    assert_eq!(out.status.code(), Some(expected_exit), "{}", stderr(&out));
    assert_eq!(report["loop"], "open");
    assert_eq!(report["requests"]["scheduled"], 20);
    assert_eq!(report["requests"]["qualified"], 20);
    assert!(report["latency"]["ttft"]["p50"].as_f64().unwrap() >= 0.005);
    // The self-calibration ran first and is in the header.
    assert!(
        !header["calibration"]["steps"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{header}"
    );
    assert_eq!(text.lines().count(), 21);
    // `shortlist analyze` reads the file the same way.
    let again = json(&run(&["analyze", records.to_str().unwrap(), "--json"]));
    assert_eq!(again["requests"]["completed"], 20);
}

#[test]
fn a_refused_connection_ends_as_error_records() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("refused.records.jsonl");
    let trace = data("loadgen/small.trace.jsonl");
    let out = bench(&[
        "--target",
        &format!("http://127.0.0.1:{port}"),
        "--trace",
        trace.to_str().unwrap(),
        "-o",
        records.to_str().unwrap(),
        "--no-calibrate",
        "--timeout-s",
        "2",
        "--json",
    ]);
    let report = json(&out);
    assert_eq!(report["requests"]["failed"], 20, "{}", stderr(&out));
    let text = std::fs::read_to_string(&records).unwrap();
    for line in text.lines().skip(1) {
        let record: Value = serde_json::from_str(line).unwrap();
        assert_eq!(record["status"], "error");
        assert!(
            record["error"].as_str().unwrap().starts_with("connect:"),
            "{record}"
        );
    }
}

#[test]
fn equal_token_totals_give_different_goodput_on_the_simulated_server() {
    let dir = tempfile::tempdir().unwrap();
    let slo = data("loadgen/chat.slo.toml");
    let mut goodput = Vec::new();
    for shape in [Shape::Uniform, Shape::Bursts] {
        let trace = practice_trace(dir.path(), shape);
        let records = dir.path().join(format!("{}.records.jsonl", shape.name()));
        let out = bench(&[
            "--target",
            SIM,
            "--trace",
            trace.to_str().unwrap(),
            "--slo",
            slo.to_str().unwrap(),
            "-o",
            records.to_str().unwrap(),
            "--json",
        ]);
        let report = json(&out);
        assert_eq!(
            report["throughput"]["requests_per_s"], 8.0,
            "every request completes"
        );
        goodput.push((
            report["goodput"]["requests_per_s"].as_f64().unwrap(),
            report["latency"]["queue"]["mean"].as_f64().unwrap(),
        ));
    }
    let (uniform, bursts) = (goodput[0], goodput[1]);
    assert_eq!(uniform.0, 8.0);
    assert!(bursts.0 < uniform.0, "{goodput:?}");
    // Why: requests of a burst queue behind its prefills.
    assert!(bursts.1 > uniform.1, "{goodput:?}");
}

#[test]
fn closed_loop_is_labelled_and_throttles_itself() {
    let dir = tempfile::tempdir().unwrap();
    let trace = practice_trace(dir.path(), Shape::Uniform);
    let records = dir.path().join("closed.records.jsonl");
    let out = bench(&[
        "--target",
        &format!("{SIM},slow_at_s=5,slow_factor=4"),
        "--trace",
        trace.to_str().unwrap(),
        "--loop",
        "closed",
        "--clients",
        "4",
        "-o",
        records.to_str().unwrap(),
        "--json",
    ]);
    let report = json(&out);
    assert_eq!(report["loop"], "closed");
    assert_eq!(report["loop_label"], "closed loop");
    assert_eq!(report["clients"], 4);
    assert_eq!(report["requests"]["completed"], 100);
}

#[test]
fn capacity_sweeps_and_searches_the_simulated_server() {
    let dir = tempfile::tempdir().unwrap();
    let trace = practice_trace(dir.path(), Shape::Uniform);
    let slo = data("loadgen/chat.slo.toml");
    let out = run(&[
        "capacity",
        "--target",
        SIM,
        "--trace",
        trace.to_str().unwrap(),
        "--slo",
        slo.to_str().unwrap(),
        "--rates",
        "4,8,16,32,64",
        "--json",
    ]);
    let report = json(&out);
    assert_eq!(report["format"], "shortlist.capacity.v1");
    assert_eq!(report["loop"], "open loop");
    assert_eq!(report["steps"].as_array().unwrap().len(), 5);
    let knee = report["finding"]["knee_rps"].as_f64().unwrap();
    let capacity = report["finding"]["max_rate_meeting_target_rps"]
        .as_f64()
        .unwrap();
    assert!(capacity >= 8.0 && capacity <= knee, "{report}");
    // --search finds a rate between the swept ones without a list.
    let out = run(&[
        "capacity",
        "--target",
        SIM,
        "--trace",
        trace.to_str().unwrap(),
        "--slo",
        slo.to_str().unwrap(),
        "--search",
        "--json",
    ]);
    let searched = json(&out);
    let found = searched["finding"]["max_rate_meeting_target_rps"]
        .as_f64()
        .unwrap();
    assert!(found >= capacity, "{found} vs swept {capacity}");
}

#[test]
fn bad_input_is_a_clear_message_and_exit_2() {
    let trace = data("loadgen/small.trace.jsonl");
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "--target",
                "engine:tiny",
                "--trace",
                trace.to_str().unwrap(),
                "-o",
                "/dev/null",
            ],
            "model",
        ),
        (
            &[
                "--target",
                "sim:max_batch=0",
                "--trace",
                trace.to_str().unwrap(),
                "-o",
                "/dev/null",
            ],
            "max_batch",
        ),
        (
            &[
                "--target",
                "ftp://x",
                "--trace",
                trace.to_str().unwrap(),
                "-o",
                "/dev/null",
            ],
            "http://",
        ),
        (
            &[
                "--target",
                "sim:",
                "--trace",
                "/nonexistent.trace.jsonl",
                "-o",
                "/dev/null",
            ],
            "nonexistent",
        ),
        (
            &[
                "--target",
                "sim:",
                "--trace",
                trace.to_str().unwrap(),
                "--clients",
                "3",
                "-o",
                "/dev/null",
            ],
            "--loop closed",
        ),
    ];
    for (args, expect) in cases {
        let out = bench(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(expect), "{args:?}: {}", stderr(&out));
    }
    let out = run(&["mock", "serve", "--itl-ms", "-1"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_trace_beyond_the_client_ceiling_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // 200,000 requests in one second: far beyond what one client process sends.
    let trace = even_trace(dir.path(), "flood", 200_000, 200_000.0, 4);
    let mock = Mock::start(&[]);
    let out = bench(&[
        "--target",
        &mock.url,
        "--trace",
        trace.to_str().unwrap(),
        "-o",
        dir.path().join("r").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("refusing to run"), "{}", stderr(&out));
}

#[test]
fn ctrl_c_stops_cleanly_and_keeps_what_was_measured() {
    let mock = Mock::start(&["--tokens", "4", "--ttft-ms", "50", "--itl-ms", "50"]);
    let dir = tempfile::tempdir().unwrap();
    let trace = even_trace(dir.path(), "long", 300, 10.0, 4);
    let records = dir.path().join("stopped.records.jsonl");
    let child = shortlist()
        .args([
            "bench",
            "--quiet",
            "--no-calibrate",
            "--json",
            "--target",
            &mock.url,
            "--trace",
        ])
        .arg(&trace)
        .arg("-o")
        .arg(&records)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    // SIGINT to our own child, by its id: what Ctrl-C sends.
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let started = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        started.elapsed().as_secs() < 10,
        "the run did not stop promptly"
    );
    let report = json(&out);
    let window_end = report["window_s"][1].as_f64().unwrap();
    assert!(
        window_end > 1.0 && window_end < 10.0,
        "{window_end}: {}",
        stderr(&out)
    );
    let scheduled = report["requests"]["scheduled"].as_u64().unwrap();
    assert!(scheduled > 10 && scheduled < 100, "{scheduled}");
    // Every line of the file is a valid record; the header was rewritten with the stop time.
    let again = json(&run(&["analyze", records.to_str().unwrap(), "--json"]));
    assert_eq!(again["requests"]["scheduled"], scheduled);
    let text = std::fs::read_to_string(&records).unwrap();
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert!(header["stopped_at_s"].as_f64().is_some(), "{header}");
}

#[test]
fn capacity_sweeps_a_real_http_target_and_keeps_each_steps_records() {
    let mock = Mock::start(&["--tokens", "8", "--ttft-ms", "5", "--itl-ms", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let trace = data("loadgen/small.trace.jsonl");
    let slo = data("loadgen/chat.slo.toml");
    let steps = dir.path().join("steps");
    let out = run(&[
        "capacity",
        "--target",
        &mock.url,
        "--model",
        "mock",
        "--trace",
        trace.to_str().unwrap(),
        "--slo",
        slo.to_str().unwrap(),
        "--rates",
        "10,20,40",
        "--allow-client-bound",
        "-o",
        steps.to_str().unwrap(),
        "--json",
    ]);
    let report = json(&out);
    assert_eq!(report["loop"], "open loop", "{report}");
    let rows = report["steps"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for (row, rate) in rows.iter().zip([10.0, 20.0, 40.0]) {
        assert_eq!(row["offered_rps"], rate);
        assert_eq!(row["scheduled"], 20, "{row}");
        // Goodput never exceeds throughput; the mock answers everything well inside the SLO.
        let (g, t) = (
            row["goodput_rps"].as_f64().unwrap(),
            row["throughput_rps"].as_f64().unwrap(),
        );
        assert!(g <= t + 1e-9, "{row}");
        assert_eq!(row["qualified"], 20, "{row}");
        // Each step's raw records are kept and read back by `analyze` to the same counts.
        let records = row["records"].as_str().unwrap();
        let again = json(&run(&["analyze", records, "--json"]));
        assert_eq!(again["requests"]["qualified"], 20);
    }
    // 20 of 20 is not proof of 90 %: the one-sided 95 % Clopper–Pearson lower bound of 20/20 is
    // 0.05^(1/20) ≈ 0.861, so no step may claim the target and no capacity is reported.
    for row in rows {
        let lb = row["attainment_lower_bound"].as_f64().unwrap();
        assert!((lb - 0.05f64.powf(1.0 / 20.0)).abs() < 1e-6, "{row}");
    }
    assert!(
        report["finding"]["max_rate_meeting_target_rps"].is_null(),
        "{report}"
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "no capacity found is a failed check"
    );
    // Steps flagged client-bound (a busy host failed the self-calibration) judge nothing: the
    // knee comes from the others only.
    let judged: Vec<f64> = rows
        .iter()
        .filter(|r| r["client_bound"] == false)
        .map(|r| r["offered_rps"].as_f64().unwrap())
        .collect();
    match judged.last() {
        Some(highest) => assert_eq!(report["finding"]["knee_rps"], *highest, "{report}"),
        None => assert!(report["finding"]["knee_rps"].is_null(), "{report}"),
    }
}

/// `bench --target engine:MODEL` loads the real model into the bench process's own engine,
/// serves it on loopback and records the engine's per-request stage timings with each attempt.
#[test]
fn bench_against_the_in_process_engine_records_stage_timings() {
    let Some(model) = crate::support::smollm2() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("tiny.trace.jsonl");
    std::fs::write(
        &trace,
        concat!(
            "{\"format\": \"shortlist.trace.v1\", \"name\": \"tiny\", \"mode\": \"online\", \"duration_s\": 2.0}\n",
            "{\"id\": \"a\", \"t\": 0.0, \"input_tokens\": 24, \"output_tokens\": 4}\n",
            "{\"id\": \"b\", \"t\": 1.0, \"input_tokens\": 24, \"output_tokens\": 4}\n",
        ),
    )
    .unwrap();
    let records = dir.path().join("engine.records.jsonl");
    let target = format!("engine:{}", model.display());
    let out = bench(&[
        "--target",
        &target,
        "--trace",
        trace.to_str().unwrap(),
        "--no-calibrate",
        "--timeout-s",
        "120",
        "-o",
        records.to_str().unwrap(),
        "--json",
    ]);
    let report = json(&out);
    assert_eq!(report["requests"]["completed"], 2, "{}", stderr(&out));
    let text = std::fs::read_to_string(&records).unwrap();
    let attempts: Vec<Value> = text
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &Value| v.get("format").is_none())
        .collect();
    assert_eq!(attempts.len(), 2);
    for a in &attempts {
        assert_eq!(a["output_tokens_source"], "server", "{a}");
        let stages = &a["stages"];
        assert!(stages["queue"].as_f64().is_some(), "{a}");
        assert!(stages["prefill"].as_f64().unwrap() > 0.0, "{a}");
    }
    assert!(
        report["stages"]["prefill"]["count"].as_u64().unwrap() >= 2,
        "{report}"
    );
}

/// TTFT (first chunk − scheduled) of every ok attempt of these records files, ascending.
fn ttfts(files: &[&Path]) -> Vec<f64> {
    let mut all = Vec::new();
    for file in files {
        for line in std::fs::read_to_string(file).unwrap().lines().skip(1) {
            let r: Value = serde_json::from_str(line).unwrap();
            if r["status"] == "ok" {
                let first = r["chunks"][0][0].as_f64().unwrap();
                all.push(first - r["scheduled_s"].as_f64().unwrap());
            }
        }
    }
    all.sort_by(f64::total_cmp);
    all
}

/// Two `bench --part` processes of one step from one agreed instant; `starve` freezes part 1
/// (SIGSTOP) for 1.5 s mid-run: its client is descheduled, as on a starved host.
fn split_step(mock: &Mock, trace: &Path, dir: &Path, tag: &str, starve: bool) -> [PathBuf; 2] {
    let start_at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3);
    let paths = [0, 1].map(|i| dir.join(format!("{tag}-{i}.records.jsonl")));
    let children: Vec<std::process::Child> = (0..2)
        .map(|i| {
            shortlist()
                .args([
                    "bench",
                    "--quiet",
                    "--no-calibrate",
                    "--json",
                    "--target",
                    &mock.url,
                ])
                .arg("--trace")
                .arg(trace)
                .arg("-o")
                .arg(&paths[i])
                .args([
                    "--part",
                    &format!("{i}/2"),
                    "--start-at",
                    &start_at.to_string(),
                ])
                .args(["--host", &format!("load-{i}")])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    if starve {
        std::thread::sleep(std::time::Duration::from_secs(3 + 3));
        let pid = children[1].id().to_string();
        assert!(
            std::process::Command::new("kill")
                .args(["-STOP", &pid])
                .status()
                .unwrap()
                .success()
        );
        std::thread::sleep(std::time::Duration::from_millis(1500));
        assert!(
            std::process::Command::new("kill")
                .args(["-CONT", &pid])
                .status()
                .unwrap()
                .success()
        );
    }
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    }
    paths
}

#[test]
fn a_step_split_across_two_load_workers_merges_to_the_one_worker_step() {
    use shortlist_measure::interval::{poisson_rate, quantile};
    use shortlist_measure::percentile::Quantile;
    let mock = Mock::start_for(
        "127.0.0.1:0",
        120,
        &["--tokens", "8", "--ttft-ms", "20", "--itl-ms", "2"],
    );
    let dir = tempfile::tempdir().unwrap();
    // 300 requests at 25 req/s: 12 s, 150 per part (enough for each part's lag p99 to be judged).
    let trace = even_trace(dir.path(), "step", 300, 25.0, 8);
    let slo = data("loadgen/chat.slo.toml");
    // A 100 ms lag allowance: a busy test host's scheduling noise stays under it, a client
    // frozen for 1.5 s does not.
    let analyze = |files: &[&Path]| {
        let mut args = vec![
            "analyze",
            "--json",
            "--client-bound-ms",
            "100",
            "--slo",
            slo.to_str().unwrap(),
        ];
        args.extend(files.iter().map(|p| p.to_str().unwrap()));
        json(&run(&args))
    };

    let one = dir.path().join("one.records.jsonl");
    let out = bench(&[
        "--no-calibrate",
        "--json",
        "--target",
        &mock.url,
        "--trace",
        trace.to_str().unwrap(),
        "-o",
        one.to_str().unwrap(),
    ]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let whole = analyze(&[&one]);
    let parts = split_step(&mock, &trace, dir.path(), "split", false);
    let merged = analyze(&[&parts[0], &parts[1]]);

    // The same step: every request once, the same window, each part's client checked.
    assert_eq!(merged["requests"]["scheduled"], 300, "{merged}");
    assert_eq!(whole["requests"]["scheduled"], 300);
    assert_eq!(merged["window_s"], whole["window_s"]);
    let hosts = merged["checks"]["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 2);
    for (i, h) in hosts.iter().enumerate() {
        assert_eq!(h["host"], format!("load-{i}"));
        assert_eq!(h["scheduled"], 150);
        assert_eq!(h["client_bound"], false, "{h}");
    }
    assert_eq!(merged["checks"]["client_bound"], false);
    // Equal within the sampling bounds: the 95 % intervals of TTFT p50 and p90 (order
    // statistics of the raw records) and of the goodput rate (Poisson) overlap. The mock's
    // service time is fixed, so its TTFT intervals are a fraction of a millisecond wide, while
    // two client processes sharing this host's two cores (against one), beside the other tests
    // of the suite running in parallel, shift TTFT by a few milliseconds either way (6.3 ms at
    // p90 in one full-suite run: 48.4 against 42.0 ms): 10 ms of slack on either side allows
    // for that. A merge that lost or mixed up records fails the counts and window above.
    let slack = 0.010;
    let (a, b) = (ttfts(&[&one]), ttfts(&[&parts[0], &parts[1]]));
    for q in [Quantile::P50, Quantile::P90] {
        let (x, y) = (
            quantile(&a, q, 0.95).unwrap(),
            quantile(&b, q, 0.95).unwrap(),
        );
        assert!(
            x.lo <= y.hi + slack && y.lo <= x.hi + slack,
            "{q:?}: one worker {x:?}, two {y:?}"
        );
    }
    let rate = |r: &Value| {
        let n = r["requests"]["qualified"].as_u64().unwrap();
        poisson_rate(n, r["window_length_s"].as_f64().unwrap(), 0.95).unwrap()
    };
    let (x, y) = (rate(&whole), rate(&merged));
    assert!(
        x.lo <= y.hi && y.lo <= x.hi,
        "goodput: one worker {x:?}, two {y:?}"
    );

    // A starved load worker: its part is client-bound, named, and so is the step.
    let starved = split_step(&mock, &trace, dir.path(), "starved", true);
    let merged = analyze(&[&starved[0], &starved[1]]);
    let hosts = merged["checks"]["hosts"].as_array().unwrap();
    assert_eq!(hosts[1]["client_bound"], true, "{}", hosts[1]);
    assert_eq!(hosts[0]["client_bound"], false, "{}", hosts[0]);
    assert_eq!(merged["checks"]["client_bound"], true);
    assert!(
        merged["warnings"].as_array().unwrap()[..2]
            .iter()
            .any(|w| w.as_str().unwrap().contains("load-1")),
        "{}",
        merged["warnings"]
    );
    let out = run(&[
        "analyze",
        "--client-bound-ms",
        "100",
        starved[0].to_str().unwrap(),
        starved[1].to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a client-bound step cannot pass"
    );

    // Parts that are not one step are refused: one part alone with another step's part.
    let out = run(&[
        "analyze",
        "--json",
        parts[0].to_str().unwrap(),
        starved[1].to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("start_at"), "{}", stderr(&out));
}
