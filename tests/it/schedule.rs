//! `shortlist schedule …` through the real binary on a SQLite database: a schedule checked
//! whole when added, ticks at given instants (nothing before the due time, one run at it, never
//! twice — not even from two processes at once), a downtime caught up once with the missed
//! instants named, pause and resume, and the history.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::support::{data, shortlist, stderr, stdout};

fn sl(url: &str, dir: &Path, args: &[&str]) -> Output {
    crate::support::on_db(url, dir, args)
}

fn ok_json(url: &str, dir: &Path, args: &[&str]) -> Value {
    let out = crate::support::ok_on_db(url, dir, args);
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

/// Twelve cases (six high-value) and the mock's answers to them, three high-value ones wrong
/// when `wrong` is set.
fn nightly_set(dir: &Path, wrong: bool) -> (String, String) {
    let mut yaml = String::from(
        "format: shortlist.evalset.v1\nname: nightly\ndescription: Sums, half of them high-value.\ncases:\n",
    );
    let mut answers = String::from("{\"format\": \"shortlist.mock-answers.v1\"}\n");
    for i in 0..12 {
        let cat = if i < 6 { "high-value" } else { "ordinary" };
        yaml.push_str(&format!(
            "  - id: sum-{i}\n    category: {cat}\n    input: \"[s{i:02}] What is {i} + 1?\"\n    checks: [{{type: contains, value: \"={}=\"}}]\n",
            i + 1
        ));
        let answer = if wrong && (1..=3).contains(&i) {
            i + 7
        } else {
            i + 1
        };
        answers.push_str(&format!(
            "{{\"match\": \"[s{i:02}]\", \"content\": \"={answer}=\"}}\n"
        ));
    }
    std::fs::write(dir.join("nightly.yaml"), &yaml).unwrap();
    let sha = shortlist_evals::EvalSet::from_yaml("nightly.yaml", &yaml)
        .unwrap()
        .sha256()
        .to_owned();
    let file = dir.join(if wrong { "wrong.jsonl" } else { "right.jsonl" });
    std::fs::write(&file, answers).unwrap();
    (sha, file.display().to_string())
}

#[test]
fn a_night_that_loses_high_value_cases_is_a_regression_and_the_gate_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (sha, right) = nightly_set(d, false);
    let (_, wrong) = nightly_set(d, true);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let text = crate::web::study_text(d, &format!("http://{addr}#mock"))
        .replace("mini.yaml", "nightly.yaml")
        .replace(
            shortlist_evals::EvalSet::from_yaml(
                "m",
                &std::fs::read_to_string(data("study/mini.yaml")).unwrap(),
            )
            .unwrap()
            .sha256(),
            &sha,
        );
    std::fs::write(d.join("mini.study.toml"), text).unwrap();
    let url = format!("sqlite://{}?mode=rwc", d.join("s.db").display());
    ok_json(&url, d, &["study", "create", "mini.study.toml", "--json"]);
    ok_json(&url, d, &["study", "lock", "mini", "--json"]);
    ok_json(
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
            "--from",
            "2026-12-01T00:00:00Z",
            "--json",
        ],
    );
    // One night: the mock answers from `answers`, the tick queues the run, a worker runs it.
    let night = |day: &str, answers: &str| {
        let _mock = crate::support::Mock::start_at(&addr, &["--answers", answers]);
        let t = ok_json(
            &url,
            d,
            &[
                "schedule",
                "tick",
                "--at",
                &format!("2026-12-{day}T03:00:00Z"),
                "--json",
            ],
        );
        assert_eq!(t["started"].as_array().unwrap().len(), 1, "{t}");
        let out = sl(&url, d, &["study", "run", "mini", "--stale-after", "0"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    };
    let check = |against: &str| {
        let out = sl(
            &url,
            d,
            &["study", "check", "mini", "--against", against, "--json"],
        );
        let v: Value =
            serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
        (out.status.code(), v)
    };

    night("01", &right);
    let (code, first) = check("previous");
    assert_eq!(
        (code, first["verdict"].as_str()),
        (Some(0), Some("insufficient_data")),
        "{first}"
    );
    ok_json(
        &url,
        d,
        &["study", "accept", "mini", "--generation", "1", "--json"],
    );

    // Three high-value cases now wrong: a regression, named, with the paired test's evidence.
    night("02", &wrong);
    for against in ["previous", "baseline"] {
        let (code, v) = check(against);
        assert_eq!(code, Some(1), "{v}");
        let c = &v["candidates"][0];
        assert_eq!(c["verdict"], "regression", "{v}");
        assert_eq!(
            (
                c["reference_generation"].as_u64(),
                c["current_generation"].as_u64()
            ),
            (Some(1), Some(2))
        );
        assert_eq!(c["overall"]["only_reference"], 3);
        assert_eq!(c["overall"]["only_current"], 0);
        let p = c["overall"]["p_value"].as_f64().unwrap();
        assert!(
            (p - 0.25).abs() < 1e-9,
            "exact McNemar of 3 vs 0 discordant pairs: {p}"
        );
        let reasons = c["reasons"].to_string();
        assert!(reasons.contains("sum-1, sum-2, sum-3"), "{reasons}");
        assert!(
            reasons.contains("disqualifier `any high-value case failed` passed and now trips"),
            "{reasons}"
        );
    }
    // A third night like the second: ok against the second, still a regression against the
    // accepted baseline.
    night("03", &wrong);
    let (code, v) = check("previous");
    assert_eq!((code, v["verdict"].as_str()), (Some(0), Some("ok")), "{v}");
    assert_eq!(v["candidates"][0]["overall"]["only_reference"], 0);
    let (code, v) = check("baseline");
    assert_eq!(
        (code, v["verdict"].as_str()),
        (Some(1), Some("regression")),
        "{v}"
    );
}
