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

/// A webhook receiver on a local port (a real HTTP server in the test): it keeps every request's
/// headers and body and answers each with the next status of `statuses` (then 200).
struct Receiver {
    url: String,
    got: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>,
}

impl Receiver {
    fn start(statuses: Vec<u16>) -> Receiver {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = got.clone();
        std::thread::spawn(move || {
            let mut statuses = statuses.into_iter();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut head = String::new();
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    head.push_str(&line);
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                keep.lock()
                    .unwrap()
                    .push((head, String::from_utf8(body).unwrap()));
                let status = statuses.next().unwrap_or(200);
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
            }
        });
        Receiver { url, got }
    }

    fn bodies(&self) -> Vec<(String, Value)> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .map(|(h, b)| (h.clone(), serde_json::from_str(b).unwrap()))
            .collect()
    }

    fn raw(&self) -> Vec<(String, String)> {
        self.got.lock().unwrap().clone()
    }
}

/// The `X-Shortlist-Signature` a receiver expects: HMAC-SHA256 of the body under the secret,
/// computed here independently of the binary (RFC 2104 over SHA-256).
fn expected_signature(secret: &str, body: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut key = secret.as_bytes().to_vec();
    if key.len() > 64 {
        key = Sha256::digest(&key).to_vec();
    }
    key.resize(64, 0);
    let pad = |b: u8| key.iter().map(|k| k ^ b).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(body)
        .finalize();
    let outer = Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize();
    format!("sha256={}", hex::encode(outer))
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

const SECRET: &str = "a-test-secret-of-some-length";

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
    let receiver = Receiver::start(Vec::new());
    // A second receiver fails its first five deliveries.
    let flaky = Receiver::start(vec![500; 5]);
    let with_secret = |args: &[&str]| {
        shortlist()
            .env("DATABASE_URL", &url)
            .env("SHORTLIST_WEBHOOK_SECRET", SECRET)
            .current_dir(d)
            .args(args)
            .output()
            .unwrap()
    };
    // A webhook is checked before the schedule is stored: no secret, or not http, stores nothing.
    let add = vec![
        "schedule",
        "add",
        "nightly",
        "--study",
        "mini",
        "--cron",
        "0 3 * * *",
        "--from",
        "2026-12-01T00:00:00Z",
        "--webhook",
        &receiver.url,
        "--json",
    ];
    let out = sl(&url, d, &add);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("SHORTLIST_WEBHOOK_SECRET"),
        "{}",
        stderr(&out)
    );
    let out = with_secret(&[&add[..9], &["--webhook", "https://example.com/hook"][..]].concat());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("http://"), "{}", stderr(&out));
    let list = ok_json(&url, d, &["schedule", "list", "--json"]);
    assert_eq!(list.as_array().unwrap().len(), 0, "{list}");
    let out = with_secret(&add);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = with_secret(&[
        "schedule", "webhook", "add", "nightly", &flaky.url, "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // One night: the mock answers from `answers`, the tick queues the run, a worker runs it
    // with `threads` compute threads, and the next pass checks it and sends its document.
    let night = |day: &str, answers: &str, threads: &str| -> Value {
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
        let out = sl(
            &url,
            d,
            &[
                "study",
                "run",
                "mini",
                "--stale-after",
                "0",
                "--threads",
                threads,
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let pass = ok_json(
            &url,
            d,
            &[
                "schedule",
                "tick",
                "--at",
                &format!("2026-12-{day}T03:05:00Z"),
                "--webhook-backoff",
                "0",
                "--json",
            ],
        );
        assert_eq!(pass["started"].as_array().unwrap().len(), 0, "{pass}");
        assert_eq!(pass["checked"].as_array().unwrap().len(), 1, "{pass}");
        pass
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
    let hooks = || {
        ok_json(
            &url,
            d,
            &["schedule", "webhook", "list", "nightly", "--json"],
        )
    };

    let pass = night("01", &right, "1");
    assert_eq!(pass["checked"][0]["verdict"], "insufficient_data", "{pass}");
    let (code, first) = check("previous");
    assert_eq!(
        (code, first["verdict"].as_str()),
        (Some(0), Some("insufficient_data")),
        "{first}"
    );
    // The flaky receiver failed; passes retry it (no backoff here) until its fifth
    // consecutive failure disables it.
    for _ in 0..4 {
        ok_json(
            &url,
            d,
            &[
                "schedule",
                "tick",
                "--at",
                "2026-12-01T03:06:00Z",
                "--webhook-backoff",
                "0",
                "--json",
            ],
        );
    }
    let h = hooks();
    let f = h
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["url"] == flaky.url.as_str())
        .unwrap();
    assert_eq!(
        (
            f["enabled"].as_bool(),
            f["failures"].as_u64(),
            f["pending"].as_u64()
        ),
        (Some(false), Some(5), Some(1)),
        "{h}"
    );
    assert!(
        f["last_error"].as_str().unwrap().contains("HTTP 500"),
        "{h}"
    );
    let quiet = ok_json(
        &url,
        d,
        &[
            "schedule",
            "tick",
            "--at",
            "2026-12-01T03:07:00Z",
            "--webhook-backoff",
            "0",
            "--json",
        ],
    );
    assert_eq!(
        quiet["deliveries"].as_array().unwrap().len(),
        0,
        "a disabled webhook gets nothing: {quiet}"
    );
    assert_eq!(flaky.raw().len(), 5);
    ok_json(
        &url,
        d,
        &["study", "accept", "mini", "--generation", "1", "--json"],
    );

    // Three high-value cases now wrong: a regression, named, with the paired test's evidence.
    let pass = night("02", &wrong, "1");
    assert_eq!(pass["checked"][0]["verdict"], "regression", "{pass}");
    assert_eq!(
        pass["checked"][0]["baseline_verdict"], "regression",
        "{pass}"
    );
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
        // The load figures were compared too, each with its interval and a verdict.
        let load = c["load"].as_array().unwrap();
        assert_eq!(load.len(), 3, "{v}");
        assert!(
            load.iter()
                .any(|f| f["figure"] == "attainment at the target rate"
                    && f["current"]["lo"].is_number()),
            "{v}"
        );
    }
    // The receiver got each night's document, signed with the secret over the exact body.
    let docs = receiver.bodies();
    assert_eq!(docs.len(), 2, "{docs:?}");
    let (_, second) = &docs[1];
    assert_eq!(second["format"], "shortlist.night.v1");
    assert_eq!(
        (second["verdict"].as_str(), second["generation"].as_u64()),
        (Some("regression"), Some(2))
    );
    let c = &second["previous"]["candidates"][0];
    assert!(
        c["reasons"].to_string().contains("sum-1, sum-2, sum-3"),
        "{second}"
    );
    assert!((c["overall"]["p_value"].as_f64().unwrap() - 0.25).abs() < 1e-9);
    assert_eq!(second["links"]["schedule"], "/schedules/nightly");
    for (head, body) in receiver.raw() {
        const HEADER: &str = "x-shortlist-signature:";
        let sig = head
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with(HEADER))
            .map(|l| l[HEADER.len()..].trim().to_owned())
            .unwrap_or_else(|| panic!("no signature header in {head}"));
        assert_eq!(sig, expected_signature(SECRET, &body));
    }
    // Enabled again by hand, the flaky webhook gets what it missed: both nights.
    let out = with_secret(&[
        "schedule", "webhook", "enable", "nightly", &flaky.url, "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let caught = ok_json(
        &url,
        d,
        &["schedule", "tick", "--at", "2026-12-02T03:10:00Z", "--json"],
    );
    assert_eq!(
        caught["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["delivered"] == true)
            .count(),
        2,
        "{caught}"
    );
    assert_eq!(flaky.raw().len(), 7);

    // A third night like the second: ok against the second, still a regression against the
    // accepted baseline.
    let pass = night("03", &wrong, "1");
    assert_eq!(
        (
            pass["checked"][0]["verdict"].as_str(),
            pass["checked"][0]["baseline_verdict"].as_str()
        ),
        (Some("ok"), Some("regression")),
        "{pass}"
    );
    let (code, v) = check("previous");
    assert_eq!((code, v["verdict"].as_str()), (Some(0), Some("ok")), "{v}");
    assert_eq!(v["candidates"][0]["overall"]["only_reference"], 0);
    assert_eq!(v["candidates"][0]["what_changed"], "nothing", "{v}");
    let (code, v) = check("baseline");
    assert_eq!(
        (code, v["verdict"].as_str()),
        (Some(1), Some("regression")),
        "{v}"
    );
    // A fourth night on another machine (two compute threads instead of one) and nothing else
    // changed: said to be the machine's change, next to its verdict.
    night("04", &wrong, "2");
    let (code, v) = check("previous");
    let c = &v["candidates"][0];
    assert_eq!(
        (code, c["what_changed"].as_str()),
        (Some(0), Some("machine")),
        "{v}"
    );
    assert!(
        c["changed"][0].as_str().unwrap().starts_with("machine: "),
        "{v}"
    );
    assert!(
        c["reasons"]
            .to_string()
            .contains("only the machine changed"),
        "{v}"
    );
    let page = ok_json(&url, d, &["schedule", "history", "nightly", "--json"]);
    assert_eq!(page.as_array().unwrap().len(), 4, "{page}");
}

/// `study status --json` of study `mini`.
fn status(url: &str, dir: &Path) -> Value {
    ok_json(url, dir, &["study", "status", "mini", "--json"])
}

/// The unix milliseconds of an RFC 3339 instant.
fn ms(t: &str) -> i64 {
    t.parse::<jiff::Timestamp>().unwrap().as_millisecond()
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// Poll `probe` every 200 ms until it returns something, failing after `secs`.
fn wait_for<T>(secs: u64, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A study whose quality run is slow (the mock waits 1.5 s before each answer, two cases in
/// flight), scheduled every
/// minute since two and a half minutes ago.
fn slow_minutely(d: &Path, url: &str) -> crate::support::Mock {
    // Up for ten minutes: the tests wait across minute boundaries.
    let mock = crate::support::Mock::start_for(
        "127.0.0.1:0",
        600,
        &[
            "--answers",
            data("study/mini.answers.jsonl").to_str().unwrap(),
            "--ttft-ms",
            "1500",
        ],
    );
    // Two cases in flight: they are answered in pairs every 1.5 s, so a kill after the first
    // pair leaves four to resume (and resuming meets cases that were in flight when killed).
    let text = crate::study::with_quality_concurrency(
        &crate::web::study_text(d, &format!("{}#mock", mock.url)),
        2,
    );
    std::fs::write(d.join("mini.study.toml"), text).unwrap();
    ok_json(url, d, &["study", "create", "mini.study.toml", "--json"]);
    ok_json(url, d, &["study", "lock", "mini", "--json"]);
    let from = jiff::Timestamp::from_millisecond(now_ms() - 150_000)
        .unwrap()
        .to_string();
    ok_json(
        url,
        d,
        &[
            "schedule",
            "add",
            "minutely",
            "--study",
            "mini",
            "--cron",
            "* * * * *",
            "--what",
            "quality",
            "--from",
            &from,
            "--json",
        ],
    );
    mock
}

/// Killed (SIGKILL) in the middle of a scheduled run and started again after a due instant
/// passed: the run resumes where it was, the instant missed while down is run once (resuming
/// the same generation, not starting another), and no instant is handled twice.
#[test]
fn a_scheduler_killed_mid_run_resumes_and_catches_up_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = format!("sqlite://{}?mode=rwc", d.join("web.db").display());
    let _mock = slow_minutely(d, &url);
    let flags = [
        "--schedule-every",
        "1",
        "--stale-after",
        "1",
        "--workers",
        "1",
    ];
    let first = crate::web::Server::start(d, &flags, &[]);
    // At start, the instants missed since `--from` are caught up once: one run, the rest
    // skipped.
    let progressed = wait_for(60, "two answered cases", || {
        let s = status(&url, d);
        let done = s["generations"][0]["jobs"]
            .as_array()?
            .iter()
            .find(|j| j["kind"] == "quality")?["progress"]["cases"]["done"]
            .as_u64()?;
        (done >= 2).then_some(done)
    });
    drop(first);
    let killed = now_ms();
    let before = ok_json(&url, d, &["schedule", "history", "minutely", "--json"]);
    let started: Vec<&Value> = before
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["state"] == "started")
        .collect();
    assert!(!started.is_empty(), "{before}");
    assert!(
        before
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["state"] == "skipped"),
        "the catch-up at start skips the older instants: {before}"
    );
    assert!(started.iter().all(|t| t["generation"] == 1), "{before}");
    // Down across a due instant.
    let next_minute = (killed / 60_000 + 1) * 60_000;
    std::thread::sleep(std::time::Duration::from_millis(
        u64::try_from(next_minute + 1_500 - killed).unwrap(),
    ));
    let restarted = now_ms();
    let second = crate::web::Server::start(d, &flags, &[]);
    let record = wait_for(120, "the resumed run's record", || {
        let out = sl(&url, d, &["record", "smol", "--study", "mini", "--json"]);
        (out.status.code() == Some(0))
            .then(|| serde_json::from_str::<Value>(&stdout(&out)).unwrap())
    });
    let s = status(&url, d);
    drop(second);
    // The run resumed: the quality job was claimed twice, its answered cases kept, and no
    // case was counted twice.
    assert_eq!(record["generation"], 1, "{record}");
    assert_eq!(record["quality"]["overall"]["n"], 6, "{record}");
    let generation_1 = s["generations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["number"] == 1)
        .unwrap();
    let quality = generation_1["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["kind"] == "quality")
        .unwrap();
    assert_eq!(
        (quality["state"].as_str(), quality["attempts"].as_u64()),
        (Some("done"), Some(2)),
        "{s}"
    );
    assert!(progressed >= 2);
    // Every instant handled once; the one missed while down started once, resuming generation 1.
    let after = ok_json(&url, d, &["schedule", "history", "minutely", "--json"]);
    let ticks = after.as_array().unwrap();
    let mut dues: Vec<&str> = ticks.iter().map(|t| t["due"].as_str().unwrap()).collect();
    dues.sort_unstable();
    dues.dedup();
    assert_eq!(dues.len(), ticks.len(), "{after}");
    let missed: Vec<&Value> = ticks
        .iter()
        .filter(|t| {
            let due = ms(t["due"].as_str().unwrap());
            due > killed && due <= restarted
        })
        .collect();
    assert_eq!(missed.len(), 1, "one instant passed while down: {after}");
    assert_eq!(
        (
            missed[0]["state"].as_str(),
            missed[0]["generation"].as_u64()
        ),
        (Some("started"), Some(1)),
        "{after}"
    );
    assert!(
        missed[0]["detail"]
            .as_str()
            .unwrap_or("")
            .contains("resumed"),
        "{after}"
    );
}

/// Two `shortlist scheduler` processes on one PostgreSQL database: each due instant is run by
/// one of them — the catch-up at start and the next minute's instant alike.
#[test]
fn two_schedulers_on_postgres_run_each_instant_once() {
    let Some(pg) = crate::support::Postgres::fresh("two_schedulers") else {
        return;
    };
    let url = pg.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _mock = slow_minutely(d, &url);
    let scheduler = || {
        shortlist()
            .env("DATABASE_URL", &url)
            .current_dir(d)
            .args(["scheduler", "--every", "1"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut both = [scheduler(), scheduler()];
    let started = now_ms();
    // Past the next minute's instant, both ticking every second.
    let next_minute = (started / 60_000 + 1) * 60_000;
    std::thread::sleep(std::time::Duration::from_millis(
        u64::try_from(next_minute + 3_000 - started).unwrap(),
    ));
    for c in &mut both {
        let _ = c.kill();
        let _ = c.wait();
    }
    let ticks = ok_json(&url, d, &["schedule", "history", "minutely", "--json"]);
    let list = ticks.as_array().unwrap();
    let mut dues: Vec<&str> = list.iter().map(|t| t["due"].as_str().unwrap()).collect();
    dues.sort_unstable();
    dues.dedup();
    assert_eq!(dues.len(), list.len(), "{ticks}");
    let started: Vec<&Value> = list.iter().filter(|t| t["state"] == "started").collect();
    // The catch-up and the live instant: two runs requested, one generation (the second
    // resumes the unfinished first; no worker ran it), and its jobs queued once.
    assert_eq!(started.len(), 2, "{ticks}");
    assert!(started.iter().all(|t| t["generation"] == 1), "{ticks}");
    assert!(list.iter().any(|t| t["state"] == "skipped"), "{ticks}");
    let s = status(&url, d);
    let generations = s["generations"].as_array().unwrap();
    assert_eq!(generations.len(), 1, "{s}");
    let kinds: Vec<&str> = generations[0]["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["kind"].as_str().unwrap())
        .collect();
    let mut unique = kinds.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(kinds.len(), unique.len(), "each job queued once: {kinds:?}");
}

/// The first run of a new study version checked against the previous run, which belongs to a
/// version with another SLO: not comparable, naming the difference — never a verdict drawn from
/// two different yardsticks.
#[test]
fn a_reference_under_another_slo_is_not_comparable() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mock = crate::support::Mock::start(&[
        "--answers",
        data("study/mini.answers.jsonl").to_str().unwrap(),
    ]);
    let url = format!("sqlite://{}?mode=rwc", d.join("s.db").display());
    let text = crate::web::study_text(d, &format!("{}#mock", mock.url));
    for (i, study) in [
        text.clone(),
        text.replace("ttft_ms = 2000", "ttft_ms = 900"),
    ]
    .iter()
    .enumerate()
    {
        std::fs::write(d.join("mini.study.toml"), study).unwrap();
        ok_json(&url, d, &["study", "create", "mini.study.toml", "--json"]);
        let lock = ok_json(&url, d, &["study", "lock", "mini", "--json"]);
        assert_eq!(lock["version"], i + 1, "{lock}");
        let out = sl(&url, d, &["study", "run", "mini", "--stale-after", "0"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let out = sl(
        &url,
        d,
        &["study", "check", "mini", "--against", "previous", "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let c = &v["candidates"][0];
    assert_eq!(v["verdict"], "not_comparable", "{v}");
    assert_eq!(
        (
            c["reference_version"].as_u64(),
            c["reference_generation"].as_u64(),
            c["current_generation"].as_u64()
        ),
        (Some(1), Some(1), Some(1)),
        "{v}"
    );
    let reasons = c["reasons"].to_string();
    assert!(reasons.contains("SLO"), "{reasons}");
}
