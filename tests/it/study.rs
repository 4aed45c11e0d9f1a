//! `shortlist study create|lock|verify|show|run|delete` and `shortlist record` (and why it has
//! none to show), driven through the real binary against a SQLite database in a temporary
//! folder: locking and verifying, a locked study refusing edits (a changed file makes a new
//! version), and a `study run` killed after some cases that resumes without running a stored
//! case again or losing one. The run tests use the real SmolLM2 model and are skipped, with the
//! reason printed, when it is absent.
//!
//! Tampering is driven from outside, as it would happen: the `sqlite3` shell edits the locked
//! row behind the store's back (after dropping the trigger that refuses it), and `study verify`
//! must then fail.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use serde_json::{Value, json};

use crate::support::{data, on_db, shortlist, smollm2, stderr, stdout};

/// A study file in `dir` over the mini eval set with candidate `source`, and a database URL.
fn setup(dir: &Path, source: &str) -> (PathBuf, String) {
    let set_path = data("study/mini.yaml");
    let yaml = std::fs::read_to_string(&set_path).unwrap();
    let set = shortlist_evals::EvalSet::from_yaml("mini.yaml", &yaml).unwrap();
    let text = std::fs::read_to_string(data("study/mini.study.toml"))
        .unwrap()
        .replace("@EVALSET@", &set_path.display().to_string())
        .replace("@SHA256@", set.sha256())
        .replace("@SOURCE@", source);
    let study = dir.join("mini.study.toml");
    std::fs::write(&study, text).unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.join("shortlist.db").display());
    (study, url)
}

fn sl(url: &str, dir: &Path, args: &[&str]) -> Output {
    on_db(url, dir, args)
}

/// The study text with `quality.concurrency = n` (cases in flight at once in its quality runs).
pub fn with_quality_concurrency(text: &str, n: u32) -> String {
    let memory = text
        .lines()
        .find(|l| l.starts_with("memory = "))
        .expect("the study names its memory");
    text.replace(
        memory,
        &format!("{memory}\nquality = {{ concurrency = {n} }}"),
    )
}

/// `study create FILE` and `study lock mini`, both succeeding.
fn create_and_lock(url: &str, dir: &Path, study: &Path) {
    let file = study.display().to_string();
    for args in [
        vec!["study", "create", file.as_str()],
        vec!["study", "lock", "mini"],
    ] {
        let out = sl(url, dir, &args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
}

fn json_of(out: &Output) -> Value {
    serde_json::from_str(&stdout(out))
        .unwrap_or_else(|e| panic!("{e}: {} / {}", stdout(out), stderr(out)))
}

#[test]
fn lock_verify_and_a_locked_study_refuses_edits() {
    let dir = tempfile::tempdir().unwrap();
    // An endpoint candidate: no model file is needed to store and lock the study.
    let (study, url) = setup(dir.path(), "http://127.0.0.1:9#nothing");
    let d = dir.path();
    let file = study.display().to_string();

    let out = sl(&url, d, &["study", "create", &file, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json_of(&out)["state"], "saved");

    // A draft cannot be verified or run.
    let out = sl(&url, d, &["study", "verify", "mini"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("not locked"), "{}", stderr(&out));
    let out = sl(&url, d, &["study", "run", "mini"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    let out = sl(&url, d, &["study", "lock", "mini", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let locked = json_of(&out);
    let sha = locked["sha256"].as_str().unwrap().to_owned();
    assert_eq!(sha.len(), 64);
    assert_eq!(locked["locked_now"], true);

    let out = sl(&url, d, &["study", "verify", "mini", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json_of(&out)["sha256"], sha.as_str());

    // Locking again changes nothing; storing the same file again neither.
    let out = sl(&url, d, &["study", "lock", "mini", "--json"]);
    assert_eq!(json_of(&out)["locked_now"], false);
    let out = sl(&url, d, &["study", "create", &file, "--json"]);
    assert_eq!(json_of(&out)["state"], "unchanged");

    // An edit makes version 2, naming the lock it replaces; version 1 keeps its hash.
    let edited = std::fs::read_to_string(&study)
        .unwrap()
        .replace("six trivial questions", "six easy questions");
    std::fs::write(&study, edited).unwrap();
    let out = sl(&url, d, &["study", "create", &file, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v2 = json_of(&out);
    assert_eq!(v2["state"], "new-version");
    assert_eq!(v2["version"], 2);
    assert_eq!(v2["previous"], sha.as_str());
    let out = sl(
        &url,
        d,
        &["study", "verify", "mini", "--version", "1", "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json_of(&out)["sha256"], sha.as_str());
    let out = sl(
        &url,
        d,
        &["study", "show", "mini", "--version", "1", "--json"],
    );
    let shown = json_of(&out);
    assert_eq!(shown["state"], "locked");
    assert_eq!(
        shown["study"]["question"],
        "Can the smallest model answer six trivial questions?"
    );
    let out = sl(&url, d, &["study", "show", "mini", "--json"]);
    assert_eq!(json_of(&out)["state"], "draft");

    // v1 as a study file's text (what the workbench's edit form holds): created again, it
    // replaces the draft v2 with v1's criteria, and reads back field for field as v1's.
    let out = sl(
        &url,
        d,
        &["study", "show", "mini", "--version", "1", "--toml"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("format = \"shortlist.study.v1\"\n"),
        "{text}"
    );
    assert!(!text.contains("version"), "{text}");
    let copy = d.join("copy.study.toml");
    std::fs::write(&copy, &text).unwrap();
    let out = sl(
        &url,
        d,
        &["study", "create", copy.to_str().unwrap(), "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json_of(&out)["version"], 2);
    let mut v2 = json_of(&sl(&url, d, &["study", "show", "mini", "--json"]))["study"].take();
    let mut v1 = shown["study"].clone();
    for s in [&mut v1, &mut v2] {
        s.as_object_mut().unwrap().remove("version");
        s.as_object_mut().unwrap().remove("previous");
    }
    assert_eq!(v2, v1);

    // Behind the store's back: the database itself refuses to change a locked row...
    let db = d.join("shortlist.db");
    let sqlite = |sql: &str| {
        std::process::Command::new("sqlite3")
            .arg(&db)
            .arg(sql)
            .output()
            .expect("the sqlite3 shell runs (scripts/test installs it)")
    };
    let refused = sqlite(
        "UPDATE studies SET canonical = replace(canonical, 'six trivial', 'six hard') \
         WHERE name = 'mini' AND version = 1",
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("study row is locked"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let out = sl(&url, d, &["study", "verify", "mini", "--version", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // ...and once someone removes that guard and edits the row, verify catches the edit.
    let edited = sqlite(
        "DROP TRIGGER studies_locked_no_update; \
         UPDATE studies SET canonical = replace(canonical, 'six trivial', 'six hard'), \
         file_json = replace(file_json, 'six trivial', 'six hard') \
         WHERE name = 'mini' AND version = 1",
    );
    assert!(
        edited.status.success(),
        "{}",
        String::from_utf8_lossy(&edited.stderr)
    );
    let out = sl(&url, d, &["study", "verify", "mini", "--version", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let said = stdout(&out);
    assert!(
        said.contains("MISMATCH") && said.contains(&sha),
        "names the lock hash: {said}"
    );

    // An unknown metric name is refused before anything is stored.
    let bad = std::fs::read_to_string(&study)
        .unwrap()
        .replace("tool_call_errors", "tool_call_mistakes");
    std::fs::write(&study, bad).unwrap();
    let out = sl(&url, d, &["study", "create", &file]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("tool_call_mistakes"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_draft_is_deleted_and_a_locked_version_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (study, url) = setup(dir.path(), "http://127.0.0.1:9#nothing");
    let d = dir.path();
    create_and_lock(&url, d, &study);
    let text = std::fs::read_to_string(&study).unwrap();
    std::fs::write(&study, text.replace("six trivial", "six easy")).unwrap();
    let out = sl(&url, d, &["study", "create", study.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Both versions are listed, each with its state and its candidates (no record yet).
    let listed = json_of(&sl(&url, d, &["study", "list", "--json"]));
    let rows: Vec<_> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap(),
                s["version"].as_u64().unwrap(),
                s["state"].as_str().unwrap(),
                s["lock_sha256"].is_string(),
                s["verdicts"].clone(),
            )
        })
        .collect();
    let unrecorded = serde_json::json!([["smol", null]]);
    assert_eq!(
        rows,
        [
            ("mini", 1, "locked", true, unrecorded.clone()),
            ("mini", 2, "draft", false, unrecorded)
        ]
    );
    assert!(
        listed[1]["question"].as_str().unwrap().contains("six easy"),
        "{listed}"
    );

    // No record is asked of what cannot have one, and the refusal says which it is.
    for (args, why) in [
        (
            vec!["record", "nobody", "--study", "mini"],
            "`nobody` is not one of its candidates (smol)",
        ),
        (
            vec!["record", "smol", "--study", "mini", "--version", "5"],
            "study `mini` v5 not found",
        ),
        (
            vec!["record", "smol", "--study", "mini"],
            "study `mini` v2: a draft has no records",
        ),
        (
            vec!["record", "smol", "--study", "mini", "--version", "1"],
            "no record yet? run `shortlist study run mini` first",
        ),
    ] {
        let out = sl(&url, d, &args);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains(why), "{args:?}: {}", stderr(&out));
    }

    // The locked v1 is refused, with the reason; the draft v2 goes, and v1 is the latest again.
    let out = sl(&url, d, &["study", "delete", "mini", "--version", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("is locked"), "{}", stderr(&out));
    let out = sl(&url, d, &["study", "delete", "mini", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        json_of(&out),
        serde_json::json!({"name": "mini", "version": 2, "remaining": 1})
    );
    let shown = json_of(&sl(&url, d, &["study", "show", "mini", "--json"]));
    assert_eq!(
        (shown["version"].as_u64(), shown["state"].as_str()),
        (Some(1), Some("locked"))
    );
    let out = sl(&url, d, &["study", "delete", "mini"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = sl(&url, d, &["study", "verify", "mini"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // A study whose only version is a draft is gone with it.
    let solo = d.join("solo.study.toml");
    std::fs::write(&solo, text.replace("name = \"mini\"", "name = \"solo\"")).unwrap();
    let out = sl(&url, d, &["study", "create", solo.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = sl(&url, d, &["study", "delete", "solo", "--json"]);
    assert_eq!(json_of(&out)["remaining"], Value::Null, "{}", stderr(&out));
    let out = sl(&url, d, &["study", "show", "solo"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn a_killed_study_run_resumes_without_redoing_or_losing_cases() {
    let Some(model) = smollm2() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (study, url) = setup(d, &format!("gguf:{}", model.display()));
    // One case at a time, so that the kill lands between stored cases: with several in
    // flight on one batch, all six can finish within one poll.
    let text = std::fs::read_to_string(&study).unwrap();
    std::fs::write(&study, with_quality_concurrency(&text, 1)).unwrap();
    create_and_lock(&url, d, &study);
    let out = sl(&url, d, &["study", "show", "mini", "--json"]);
    let shown = json_of(&out);
    let identity = &shown["candidates"][0]["stored"]["gguf"]["identity"];
    assert_eq!(identity["license"], "apache-2.0");
    assert_eq!(
        identity["weights_sha256"],
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    );
    assert!(
        identity["architecture"]
            .as_str()
            .unwrap()
            .starts_with("llama (30 layers")
    );

    // First run: kill it once two cases are stored, as the database tells any process.
    let mut child = shortlist()
        .env("DATABASE_URL", &url)
        .current_dir(d)
        .args(["study", "run", "mini", "--max-tokens", "16"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let mut seen = 0;
    while started.elapsed() < std::time::Duration::from_secs(300) {
        if let Some(done) = quality_cases_done(&url, d)
            && done >= 2
        {
            seen = done;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    child.kill().unwrap();
    let _ = child.wait();
    assert!(seen >= 2, "the first run stored cases before the kill");
    let first = stored_cases(&url, d);
    assert!(first.len() >= 2 && first.len() < 6, "{first:?}");

    // Second run: takes over the dead worker's job and finishes.
    let out = sl(
        &url,
        d,
        &[
            "study",
            "run",
            "mini",
            "--max-tokens",
            "16",
            "--stale-after",
            "0",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ran = json_of(&out);
    assert!(ran["failed"].as_array().unwrap().is_empty(), "{ran}");
    // The resumed quality job started from the stored cases: its first progress event of the
    // second attempt counts them, and the stored cases of the first run are unchanged.
    let status = json_of(&sl(
        &url,
        d,
        &["study", "status", "mini", "--json", "--events-after", "0"],
    ));
    let quality_job = status["generations"][0]["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["kind"] == "quality")
        .unwrap()["id"]
        .clone();
    let counts: Vec<(u64, u64)> = status["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"]["job"] == quality_job && e["event"]["cases"].is_object())
        .map(|e| {
            (
                e["event"]["attempt"].as_u64().unwrap(),
                e["event"]["cases"]["done"].as_u64().unwrap(),
            )
        })
        .collect();
    let resumed_at = counts
        .iter()
        .find(|(attempt, _)| *attempt == 2)
        .map(|(_, done)| *done)
        .expect("the taken-over job's second attempt reported progress");
    assert_eq!(resumed_at as usize, first.len(), "{counts:?}");
    // Asked for no thread count, the load run left a core to the load generator and the
    // quality run, on two cores, computed on both; each run's fingerprint says which.
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let threads_of = |kind: &str| {
        let runs = status["generations"][0]["runs"].as_array().unwrap();
        let run = runs.iter().find(|r| r["kind"] == kind).unwrap();
        let machine = run["machine"].as_str().unwrap().to_owned();
        let words = machine.rsplit(", ").next().unwrap().to_owned();
        (words, machine)
    };
    let plural = |n: usize| format!("{n} compute thread{}", if n == 1 { "" } else { "s" });
    let (quality, machine) = threads_of("quality");
    let load_threads = cores.saturating_sub(1).max(1);
    let quality_threads = if cores == 2 { 2 } else { load_threads };
    assert_eq!(quality, plural(quality_threads), "{machine}");
    let (load, machine) = threads_of("load");
    assert_eq!(load, plural(load_threads), "{machine}");
    let host = machine.rsplit_once(", ").unwrap().0.to_owned();
    assert_eq!(counts.last().unwrap().1, 6, "{counts:?}");
    let all = stored_cases(&url, d);
    assert_eq!(all.len(), 6, "no case was lost: {all:?}");
    for (case, output) in &first {
        assert_eq!(
            all.get(case),
            Some(output),
            "a stored case was not asked again"
        );
    }

    // The record: sealed, stamped with the lock, every case counted, verdicts with evidence.
    let out = sl(&url, d, &["record", "smol", "--study", "mini", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let record = json_of(&out);
    let verify = sl(&url, d, &["study", "verify", "mini", "--json"]);
    assert_eq!(record["study"]["lock_sha256"], json_of(&verify)["sha256"]);
    assert_eq!(record["record_sha256"].as_str().unwrap().len(), 64);
    // The record names the host once, with each kind of run's threads where they differ.
    let threads = if quality_threads == load_threads {
        plural(load_threads)
    } else {
        format!(
            "{} for quality, {load_threads} for load and sweep",
            plural(quality_threads)
        )
    };
    assert_eq!(record["machine"], format!("{host}, {threads}"));
    assert_eq!(record["performance"]["hardware"], record["machine"]);
    assert_eq!(record["quality"]["overall"]["n"], 6);
    // The engine tells each greedy answer's top-2 gaps: every answered case is counted.
    let ties = &record["quality"]["near_ties"];
    assert_eq!(ties["known"], 6, "{ties}");
    assert!(ties["cases"].as_u64().unwrap() <= 6, "{ties}");
    // Asked again six at a time on one compute thread (the run asked one at a time on
    // `quality_threads`), every answer comes back the same — text, tokens, verdicts and the
    // top-2 gap to the bit: the kernels do not depend on the batch or the threads.
    let out = shortlist()
        .env("DATABASE_URL", &url)
        .env("CANDLE_NUM_THREADS", "1")
        .current_dir(d)
        .args(["study", "reproduce", "mini", "--candidate", "smol"])
        .args(["--concurrency", "6", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let again = json_of(&out);
    assert_eq!(
        (&again["asked"], &again["same"], &again["kind"]),
        (&json!(6), &json!(6), &json!("local")),
        "{again}"
    );
    assert_eq!(
        (&again["concurrency_then"], &again["concurrency_now"]),
        (&json!(1), &json!(6))
    );
    let changed: Vec<String> = if quality_threads == 1 {
        Vec::new()
    } else {
        vec![format!("compute threads: {quality_threads} → 1")]
    };
    assert_eq!(
        again["changed"],
        json!(changed),
        "same weights, code and machine"
    );
    assert!(
        again["cases"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["min_top2_gap"].is_f64()),
        "{again}"
    );
    assert_eq!(record["memory"]["fits"], true);
    let rules = record["disqualifiers"].as_array().unwrap();
    assert_eq!(rules.len(), 4);
    let license = rules
        .iter()
        .find(|r| r["rule"].as_str().unwrap().contains("license"));
    assert_eq!(license.unwrap()["outcome"], "pass", "{rules:?}");
    // Performance: the load run at the target rate (0.5 req/s) and the sweep, measured again
    // from the stored raw records; open loop named; TTFT with its population.
    let perf = &record["performance"];
    assert_eq!(perf["target_rps"], 0.5);
    assert!(
        perf["loop_label"].as_str().unwrap().contains("open"),
        "{perf}"
    );
    let rates: Vec<f64> = perf["sweep"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["offered_rps"].as_f64().unwrap())
        .collect();
    assert!(rates.len() >= 3, "{rates:?}");
    assert!(rates.windows(2).all(|w| w[0] < w[1]), "{rates:?}");
    assert!(
        rates.contains(&0.5) && rates.contains(&1.0) && rates.contains(&2.0),
        "{rates:?}"
    );
    let ttft = perf["latencies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["metric"] == "TTFT")
        .unwrap();
    assert!(
        ttft["population"].as_str().unwrap().contains("schedul"),
        "{ttft}"
    );
    assert!(ttft["count"].as_u64().unwrap() > 0);
    assert_eq!(
        perf["ttft_samples_s"].as_array().unwrap().len() as u64,
        ttft["count"].as_u64().unwrap()
    );
    let goodput = perf["goodput_rps"].as_f64().unwrap();
    assert!(goodput <= perf["throughput_rps"].as_f64().unwrap() + 1e-9);
    let overload = record["operations"]["overload_behaviour"].as_str().unwrap();
    assert!(!overload.contains("not measured"), "{overload}");
    match perf["capacity_rps"].as_f64() {
        Some(capacity) => assert_eq!(
            record["cost"]["capacity_rps_per_replica"].as_f64(),
            Some(capacity),
            "cost is sized by the measured capacity"
        ),
        None => assert!(
            record["cost"]["why"]
                .as_str()
                .unwrap()
                .contains("no included step of the sweep met"),
            "{}",
            record["cost"]
        ),
    }

    // The record's text form prints the same hashes.
    let out = sl(&url, d, &["record", "smol", "--study", "mini"]);
    assert!(stdout(&out).contains(record["record_sha256"].as_str().unwrap()));
}

/// Cases the quality job has stored so far, from its latest progress in the database.
fn quality_cases_done(url: &str, dir: &Path) -> Option<u64> {
    let out = sl(url, dir, &["study", "status", "mini", "--json"]);
    let status: Value = serde_json::from_str(&stdout(&out)).ok()?;
    status["generations"][0]["jobs"]
        .as_array()?
        .iter()
        .find(|j| j["kind"] == "quality")?["progress"]["cases"]["done"]
        .as_u64()
}

/// The stored cases of the quality run (case id → output), read with the sqlite3 shell.
fn stored_cases(url: &str, _dir: &Path) -> std::collections::BTreeMap<String, String> {
    let db = url
        .trim_start_matches("sqlite://")
        .split('?')
        .next()
        .unwrap()
        .to_owned();
    let out = std::process::Command::new("sqlite3")
        .arg("-separator")
        .arg("\t")
        .arg(&db)
        .arg(
            "SELECT c.case_id, c.created_at_ms FROM case_results c JOIN runs r ON r.id = c.run_id \
             WHERE r.kind = 'quality'",
        )
        .output()
        .expect("the sqlite3 shell runs (scripts/test installs it)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect()
}

/// The whole seam through the binary without a model: a study whose candidate is the mock with
/// canned answers, created, locked, run by `study run` (the worker until idle), its record read
/// back; then a second generation, which leaves the first record as it was.
#[test]
fn a_study_runs_through_the_binary_against_canned_answers() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let answers = data("study/mini.answers.jsonl");
    let mock = crate::support::Mock::start(&["--answers", answers.to_str().unwrap()]);
    let (study, url) = setup(d, &format!("{}#mock", mock.url));
    let text = std::fs::read_to_string(&study)
        .unwrap()
        .replace("rate_rps = 0.5", "rate_rps = 8.0")
        .replace("peak_rps = 0.5", "peak_rps = 8.0")
        .replace("sweep_rps = [1.0, 2.0]", "sweep_rps = [16.0]");
    std::fs::write(&study, text).unwrap();
    create_and_lock(&url, d, &study);
    let out = sl(&url, d, &["study", "run", "mini", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ran = json_of(&out);
    assert_eq!(ran["generation"], 1);
    assert_eq!(ran["done"].as_array().unwrap().len(), 4, "{ran}");
    // The list says the run is done and gives the record's verdict.
    let listed = json_of(&sl(&url, d, &["study", "list", "--json"]));
    assert_eq!(
        (&listed[0]["state"], &listed[0]["verdicts"]),
        (
            &serde_json::json!("done"),
            &serde_json::json!([["smol", "disqualified"]])
        ),
        "{listed}"
    );
    let record = |generation: &str| {
        let out = sl(
            &url,
            d,
            &[
                "record",
                "smol",
                "--study",
                "mini",
                "--generation",
                generation,
                "--json",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        stdout(&out)
    };
    let first = record("1");
    let r: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(r["generation"], 1);
    assert_eq!(r["verdict"], "disqualified");
    assert_eq!(r["quality"]["overall"]["passed"], 5);
    assert_eq!(r["quality"]["overall"]["n"], 6);

    // A complete study is left alone unless asked again; then it runs as generation 2.
    let out = sl(&url, d, &["study", "run", "mini", "--json"]);
    assert_eq!(json_of(&out)["done"].as_array().unwrap().len(), 0);
    let out = sl(&url, d, &["study", "run", "mini", "--again", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json_of(&out)["generation"], 2);
    let second: Value = serde_json::from_str(&record("2")).unwrap();
    assert_eq!(second["generation"], 2);
    assert_eq!(record("1"), first, "generation 1's record is unchanged");
    let status = json_of(&sl(&url, d, &["study", "status", "mini", "--json"]));
    let runs = status["generations"][0]["runs"].as_array().unwrap();
    assert!(
        runs.iter()
            .all(|r| r["machine"].as_str().unwrap().contains("CPU backend")),
        "{runs:?}"
    );
    // `--generations 1`: the newest in full, the other a line with the whole view's figures.
    let newest = json_of(&sl(
        &url,
        d,
        &["study", "status", "mini", "--json", "--generations", "1"],
    ));
    assert_eq!(
        newest["generations"],
        serde_json::json!([status["generations"][0]])
    );
    let line = &newest["earlier"][0];
    assert_eq!(newest["earlier"].as_array().unwrap().len(), 1, "{newest}");
    assert_eq!(line["number"], 1);
    assert_eq!(line["verdicts"], status["generations"][1]["verdicts"]);
    assert_eq!(line["verdicts"]["smol"], "disqualified");
    assert_eq!(
        line["jobs"],
        serde_json::json!({"done": status["generations"][1]["jobs"].as_array().unwrap().len()})
    );
    assert_eq!(line["cancellable"], 0);

    // The two generations side by side from the command line: the same canned answers, so the
    // paired table has no discordant case and no case is listed as a disagreement.
    let out = sl(
        &url,
        d,
        &[
            "study",
            "compare",
            "mini",
            "--candidates",
            "smol,smol@g1",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let cmp = json_of(&out);
    let columns: Vec<_> = cmp["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["candidate"].clone(), c["generation"].clone()))
        .collect();
    assert_eq!(
        columns,
        [
            (serde_json::json!("smol"), serde_json::json!(2)),
            (serde_json::json!("smol"), serde_json::json!(1))
        ]
    );
    let pair = &cmp["pairs"][0];
    assert_eq!(
        (
            &pair["both_pass"],
            &pair["only_a"],
            &pair["only_b"],
            &pair["both_fail"]
        ),
        (
            &serde_json::json!(5),
            &serde_json::json!(0),
            &serde_json::json!(0),
            &serde_json::json!(1)
        ),
        "{pair}"
    );
    assert_eq!(cmp["cases"].as_array().unwrap().len(), 6);
    assert!(
        cmp["cases"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["disagreement"] == false),
        "{cmp}"
    );
    // The JSON is the API's document; without `--candidates`, every candidate of the version.
    let all = json_of(&sl(&url, d, &["study", "compare", "mini", "--json"]));
    assert_eq!(all["candidates"], serde_json::json!(["smol"]));
    // A column that is not a candidate is refused as bad input.
    let out = sl(
        &url,
        d,
        &["study", "compare", "mini", "--candidates", "smol,ghost"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    // One case with its answer, of the newest generation or an earlier one: the canned
    // "The answer is 7." fails the arithmetic check.
    let case = |args: &[&str]| {
        let mut all = vec!["study", "case", "mini", "arithmetic", "--json"];
        all.extend_from_slice(args);
        let out = sl(&url, d, &all);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        json_of(&out)
    };
    let newest = case(&[]);
    assert_eq!(
        (
            &newest["id"],
            &newest["generation"],
            &newest["answers"][0]["candidate"]
        ),
        (
            &serde_json::json!("arithmetic"),
            &serde_json::json!(2),
            &serde_json::json!("smol")
        ),
        "{newest}"
    );
    let answer = &newest["answers"][0];
    assert_eq!(answer["output"], "The answer is 7.", "{newest}");
    assert_eq!(answer["result"]["outcome"], "fail", "{newest}");
    assert_eq!(case(&["--generation", "1"])["generation"], 1);
    let out = sl(&url, d, &["study", "case", "mini", "arithmetc"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("did you mean `arithmetic`?"),
        "{}",
        stderr(&out)
    );
}

/// The demo study of `scripts/demo` reads as it is: created from another folder (its eval set
/// path is relative to the study file), its candidates' GGUF files read. Skipped, with the
/// reason, when the real models are absent.
#[test]
fn the_demo_study_is_created_from_any_folder() {
    if smollm2().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("demo.db").display());
    let study = crate::support::repo_root().join("studies/support-assistant.study.toml");
    let out = sl(
        &url,
        dir.path(),
        &["study", "create", study.to_str().unwrap(), "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json_of(&out)["state"], "saved");
    let shown = json_of(&sl(
        &url,
        dir.path(),
        &["study", "show", "support-assistant", "--json"],
    ));
    assert_eq!(shown["candidates"].as_array().unwrap().len(), 2);
}
