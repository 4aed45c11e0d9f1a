//! `shortlist schedule …` through the real binary on a SQLite database: a schedule checked
//! whole when added, ticks at given instants (nothing before the due time, one run at it, never
//! twice — not even from two processes at once), a downtime caught up once with the missed
//! instants named, pause and resume, and the history.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::support::{data, shortlist, stderr, stdout};

fn sl(url: &str, dir: &Path, args: &[&str]) -> Output {
    shortlist()
        .env("DATABASE_URL", url)
        .current_dir(dir)
        .args(args)
        .output()
        .expect("the shortlist binary runs")
}

fn ok_json(url: &str, dir: &Path, args: &[&str]) -> Value {
    let out = sl(url, dir, args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)))
}

fn dues(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|t| t["due"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn ticks_run_each_due_instant_once_and_catch_up_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let set_path = data("study/mini.yaml");
    let yaml = std::fs::read_to_string(&set_path).unwrap();
    let set = shortlist_evals::EvalSet::from_yaml("mini.yaml", &yaml).unwrap();
    let text = std::fs::read_to_string(data("study/mini.study.toml"))
        .unwrap()
        .replace("@EVALSET@", &set_path.display().to_string())
        .replace("@SHA256@", set.sha256())
        .replace("@SOURCE@", "http://127.0.0.1:9#nothing");
    std::fs::write(d.join("mini.study.toml"), text).unwrap();
    let url = format!("sqlite://{}?mode=rwc", d.join("s.db").display());
    ok_json(&url, d, &["study", "create", "mini.study.toml", "--json"]);

    // Checked whole before anything is stored: a study never locked cannot be scheduled, a bad
    // expression names its field, an unknown zone or candidate is refused.
    let add = |extra: &[&str]| {
        let mut args = vec!["schedule", "add", "nightly", "--study", "mini", "--json"];
        args.extend_from_slice(extra);
        sl(&url, d, &args)
    };
    let out = add(&["--cron", "0 3 * * *"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no version is locked"),
        "{}",
        stderr(&out)
    );
    ok_json(&url, d, &["study", "lock", "mini", "--json"]);
    for (extra, says) in [
        (vec!["--cron", "0 25 * * *"], "hour field `25`"),
        (
            vec!["--cron", "0 3 * * *", "--tz", "Nowhere/City"],
            "Nowhere/City",
        ),
        (
            vec!["--cron", "0 3 * * *", "--candidates", "ghost"],
            "no candidate `ghost`",
        ),
        (
            vec!["--cron", "0 3 * * *", "--from", "yesterday"],
            "not an RFC 3339 instant",
        ),
    ] {
        let out = add(&extra);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{extra:?}: {}", stderr(&out));
    }
    assert_eq!(
        ok_json(&url, d, &["schedule", "list", "--json"]),
        serde_json::json!([])
    );

    // 03:00 in Berlin (02:00Z in winter), quality only, from the first of December.
    let added = ok_json(
        &url,
        d,
        &[
            "schedule",
            "add",
            "nightly",
            "--study",
            "mini",
            "--cron",
            "0 3 * * *",
            "--tz",
            "Europe/Berlin",
            "--what",
            "quality",
            "--from",
            "2026-12-01T00:00:00Z",
            "--json",
        ],
    );
    assert_eq!(added["what"], "quality");
    let tick = |at: &str| ok_json(&url, d, &["schedule", "tick", "--at", at, "--json"]);

    let early = tick("2026-12-01T01:59:00Z");
    assert_eq!(early["started"], serde_json::json!([]), "{early}");
    let first = tick("2026-12-01T02:00:00Z");
    assert_eq!(dues(&first["started"]), ["2026-12-01T02:00:00Z"], "{first}");
    assert_eq!(first["started"][0]["generation"], 1);
    // The same instant again starts nothing: it is claimed.
    assert_eq!(
        tick("2026-12-01T02:30:00Z")["started"],
        serde_json::json!([])
    );
    // The run takes the quality measurement only (and the fit and record).
    let status = ok_json(&url, d, &["study", "status", "mini", "--json"]);
    let mut kinds: Vec<String> = status["generations"][0]["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["kind"].as_str().unwrap().to_owned())
        .collect();
    kinds.sort();
    assert_eq!(kinds, ["fit", "quality", "record"]);
    assert_eq!(status["generations"][0]["trigger"], "schedule");

    // Two schedulers ticking the next night at once: one run.
    let children: Vec<_> = (0..2)
        .map(|_| {
            shortlist()
                .env("DATABASE_URL", &url)
                .current_dir(d)
                .args(["schedule", "tick", "--at", "2026-12-02T02:00:00Z", "--json"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let started: usize = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert_eq!(out.status.code(), Some(0));
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            v["started"].as_array().unwrap().len()
        })
        .sum();
    assert_eq!(started, 1);

    // Down for three nights: the latest missed instant runs once, the others are named.
    let back = tick("2026-12-05T09:00:00Z");
    assert_eq!(dues(&back["started"]), ["2026-12-05T02:00:00Z"], "{back}");
    assert_eq!(
        dues(&back["skipped"]),
        ["2026-12-03T02:00:00Z", "2026-12-04T02:00:00Z"]
    );

    // Paused: nothing runs; resumed: one catch-up.
    ok_json(&url, d, &["schedule", "pause", "nightly", "--json"]);
    assert_eq!(
        tick("2026-12-06T02:00:00Z")["started"],
        serde_json::json!([])
    );
    let resumed = ok_json(&url, d, &["schedule", "resume", "nightly", "--json"]);
    assert_eq!(resumed["enabled"], true);
    assert_eq!(
        dues(&tick("2026-12-07T02:10:00Z")["started"]),
        ["2026-12-07T02:00:00Z"]
    );

    let history = ok_json(&url, d, &["schedule", "history", "nightly", "--json"]);
    let states: Vec<(&str, &str)> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["due"].as_str().unwrap(), t["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        [
            ("2026-12-07T02:00:00Z", "started"),
            ("2026-12-06T02:00:00Z", "skipped"),
            ("2026-12-05T02:00:00Z", "started"),
            ("2026-12-04T02:00:00Z", "skipped"),
            ("2026-12-03T02:00:00Z", "skipped"),
            ("2026-12-02T02:00:00Z", "started"),
            ("2026-12-01T02:00:00Z", "started"),
        ]
    );
    ok_json(&url, d, &["schedule", "remove", "nightly", "--json"]);
    let gone = sl(&url, d, &["schedule", "history", "nightly"]);
    assert_eq!(gone.status.code(), Some(2), "{}", stderr(&gone));
}
