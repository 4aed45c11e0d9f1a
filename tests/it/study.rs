//! `shortlist study create|lock|verify|show|run` and `shortlist record`, driven through the real
//! binary against a SQLite database in a temporary folder: locking and verifying, a locked study
//! refusing edits (a changed file makes a new version), and a `study run` killed after some
//! cases that resumes without running a stored case again or losing one. The run tests use the
//! real SmolLM2 model and are skipped, with the reason printed, when it is absent.
//!
//! Tampering is driven from outside, as it would happen: the `sqlite3` shell edits the locked
//! row behind the store's back (after dropping the trigger that refuses it), and `study verify`
//! must then fail.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use serde_json::Value;

use crate::support::{data, shortlist, smollm2, stderr, stdout};

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
    shortlist()
        .env("DATABASE_URL", url)
        .current_dir(dir)
        .args(args)
        .output()
        .expect("the shortlist binary runs")
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
fn a_killed_study_run_resumes_without_redoing_or_losing_cases() {
    let Some(model) = smollm2() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (study, url) = setup(d, &format!("gguf:{}", model.display()));
    let file = study.display().to_string();
    for args in [
        vec!["study", "create", file.as_str()],
        vec!["study", "lock", "mini"],
    ] {
        let out = sl(&url, d, &args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
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

    // First run: kill it once two cases are stored.
    let mut child = shortlist()
        .env("DATABASE_URL", &url)
        .current_dir(d)
        .args(["study", "run", "mini", "--max-tokens", "16"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = Vec::new();
    let mut log = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        log.push_str(&line);
        log.push('\n');
        if let Some(case) = case_done(&line) {
            first.push(case);
            if first.len() == 2 {
                child.kill().unwrap();
                break;
            }
        }
    }
    let _ = child.wait();
    assert_eq!(
        first.len(),
        2,
        "the first run stored two cases before the kill:\n{log}"
    );

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
        ],
    );
    let log2 = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{log2}");
    assert!(
        log2.contains("resuming, 2/6 cases already stored"),
        "{log2}"
    );
    let second: Vec<String> = log2.lines().filter_map(case_done).collect();
    let a: BTreeSet<_> = first.iter().cloned().collect();
    let b: BTreeSet<_> = second.iter().cloned().collect();
    assert_eq!(b.len(), second.len(), "no case ran twice in the second run");
    assert!(a.is_disjoint(&b), "no stored case ran again: {a:?} {b:?}");
    let all: BTreeSet<_> = a.union(&b).cloned().collect();
    assert_eq!(all.len(), 6, "no case was lost: {all:?}");

    // The record: sealed, stamped with the lock, every case counted, verdicts with evidence.
    let out = sl(&url, d, &["record", "smol", "--study", "mini", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let record = json_of(&out);
    let verify = sl(&url, d, &["study", "verify", "mini", "--json"]);
    assert_eq!(record["study"]["lock_sha256"], json_of(&verify)["sha256"]);
    assert_eq!(record["record_sha256"].as_str().unwrap().len(), 64);
    assert_eq!(record["quality"]["overall"]["n"], 6);
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
                .contains("no rate met"),
            "{}",
            record["cost"]
        ),
    }

    // The record's text form prints the same hashes.
    let out = sl(&url, d, &["record", "smol", "--study", "mini"]);
    assert!(stdout(&out).contains(record["record_sha256"].as_str().unwrap()));
}

/// `smol: case ID done (...)` → ID.
fn case_done(line: &str) -> Option<String> {
    let rest = line.strip_prefix("smol: case ")?;
    let (id, tail) = rest.split_once(' ')?;
    tail.starts_with("done").then(|| id.to_owned())
}
