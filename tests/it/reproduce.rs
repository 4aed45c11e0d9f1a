//! Whether a quality run reproduces: `shortlist study reproduce` asks a generation's stored cases
//! again and compares every answer; the check is stored, `GET
//! /api/studies/{name}/candidates/{c}/reproductions` lists it and the record page shows the
//! newest. Here against the mock (an endpoint whose answers the test changes between the run and
//! the check); `study::a_killed_study_run_resumes_without_redoing_or_losing_cases` reproduces a
//! real model's run at another batch size and thread count.

use serde_json::{Value, json};

use crate::support::{Mock, data, shortlist, stderr};
use crate::web::{Server, http, study_text};

/// `study reproduce mini --candidate canned ARGS --json` on the database of `dir`: its exit
/// status and document.
fn reproduce(dir: &std::path::Path, args: &[&str]) -> (Option<i32>, Value) {
    let out = shortlist()
        .env("DATABASE_URL", db(dir))
        .current_dir(dir)
        .args([
            "study",
            "reproduce",
            "mini",
            "--candidate",
            "canned",
            "--json",
        ])
        .args(args)
        .output()
        .unwrap();
    let doc =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
    (out.status.code(), doc)
}

fn db(dir: &std::path::Path) -> String {
    format!("sqlite://{}?mode=rwc", dir.join("shortlist.db").display())
}

#[test]
fn a_quality_run_asked_again_says_which_answers_and_verdicts_moved() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let canned = data("study/mini.answers.jsonl");
    let mock = Mock::start(&["--answers", canned.to_str().unwrap()]);
    let addr = mock.url.trim_start_matches("http://").to_owned();
    let text = study_text(d, &format!("{}#mock", mock.url)).replace("\"smol\"", "\"canned\"");
    std::fs::write(d.join("mini.study.toml"), text).unwrap();
    let env_db = |args: &[&str]| {
        shortlist()
            .env("DATABASE_URL", db(d))
            .current_dir(d)
            .args(args)
            .output()
            .unwrap()
    };
    for args in [
        &["study", "create", "mini.study.toml", "--json"][..],
        &["study", "lock", "mini", "--json"],
        &["study", "run", "mini", "--max-tokens", "16", "--json"],
    ] {
        let out = env_db(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }

    // Before any check the record page says how to make one.
    let url = db(d);
    let server = Server::start_on(&url, d, &["--workers", "0"]);
    let page = http(
        &server.addr,
        "GET",
        "/studies/mini/candidates/canned",
        &[],
        b"",
    );
    assert!(
        page.body.contains("Not asked again yet")
            && page
                .body
                .contains("shortlist study reproduce mini --candidate canned --generation 1"),
        "{}",
        page.body
    );

    // The same endpoint, the same answers: every case the same, stored.
    let (code, same) = reproduce(d, &[]);
    assert_eq!(code, Some(0), "{same}");
    assert_eq!(
        (&same["asked"], &same["stored"], &same["same"], &same["ok"]),
        (&json!(6), &json!(6), &json!(6), &json!(true)),
        "{same}"
    );
    assert_eq!(
        (&same["kind"], &same["generation"]),
        (&json!("endpoint"), &json!(1))
    );
    assert_eq!(
        same["decoding"], "greedy, max 16 tokens",
        "the run's decoding"
    );
    assert_eq!(same["changed"], json!([]), "{same}");
    assert!(
        same["cases"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["same"] == true)
    );

    // The endpoint now answers two cases otherwise: the capital wrongly (a verdict moves) and
    // the colour in more words (the verdict holds). Exit 1, each difference named.
    drop(mock);
    let other = d.join("other.jsonl");
    std::fs::write(
        &other,
        std::fs::read_to_string(&canned)
            .unwrap()
            .replace("\"Paris.\"", "\"Lyon.\"")
            .replace("\"Blue.\"", "\"The sky is blue.\""),
    )
    .unwrap();
    let mock = Mock::start_at(&addr, &["--answers", other.to_str().unwrap()]);
    let (code, moved) = reproduce(d, &[]);
    assert_eq!(code, Some(1), "{moved}");
    assert_eq!(
        (
            &moved["same"],
            &moved["different"],
            &moved["verdicts_changed"],
            &moved["errors"],
            &moved["ok"]
        ),
        (&json!(4), &json!(2), &json!(1), &json!(0), &json!(false)),
        "{moved}"
    );
    let case = |doc: &Value, id: &str| {
        doc["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap()
            .clone()
    };
    let capital = case(&moved, "capital");
    assert_eq!(
        capital["differs"],
        json!(["output", "check contains"]),
        "{capital}"
    );
    assert_eq!(
        (&capital["then"], &capital["now"]),
        (&json!("Paris."), &json!("Lyon."))
    );
    assert_eq!(
        (&capital["passed_then"], &capital["passed_now"]),
        (&json!(true), &json!(false))
    );
    let colour = case(&moved, "colour");
    assert_eq!(colour["differs"], json!(["output", "tokens"]), "{colour}");
    assert_eq!(
        (&colour["passed_then"], &colour["passed_now"]),
        (&json!(true), &json!(true))
    );
    // In words: the counts and each difference word by word.
    let out = env_db(&["study", "reproduce", "mini", "--candidate", "canned"]);
    assert_eq!(out.status.code(), Some(1));
    let words = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        words.contains("[-Paris.-]{+Lyon.+}") && words.contains("passed → failed"),
        "{words}"
    );

    // A sample: as many cases as asked for, the same ones for the same seed.
    let (_, a) = reproduce(d, &["--cases", "3", "--seed", "7"]);
    let (_, b) = reproduce(d, &["--cases", "3", "--seed", "7"]);
    let picked = |doc: &Value| -> Vec<String> {
        doc["cases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        (&a["asked"], &a["stored"], &a["seed"]),
        (&json!(3), &json!(6), &json!(7))
    );
    assert_eq!(picked(&a), picked(&b));

    // The endpoint gone: nothing compared, exit 1; the check stops after three cases that
    // never reached it, as a quality run does, and says the rest were not asked.
    drop(mock);
    let (code, gone) = reproduce(d, &["--concurrency", "1"]);
    assert_eq!(code, Some(1), "{gone}");
    assert_eq!(
        (&gone["errors"], &gone["same"], &gone["ok"]),
        (&json!(6), &json!(0), &json!(false)),
        "{gone}"
    );
    let errors: Vec<&str> = gone["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["error"].as_str().unwrap())
        .collect();
    // (The endpoint's client may have the next case under way when it hears the third.)
    let not_asked = errors.iter().filter(|e| e.starts_with("not asked")).count();
    assert!((1..=3).contains(&not_asked), "{errors:?}");

    // Refused with the reason: a candidate the study does not have (its candidates named), a
    // generation that never ran, no cases.
    for (args, said) in [
        (&["--candidate", "cannde"][..], "did you mean `canned`?"),
        (
            &["--candidate", "canned", "--generation", "9"],
            "generation 9",
        ),
        (&["--candidate", "canned", "--cases", "0"], "--cases"),
    ] {
        let why = refused_on(
            &url,
            d,
            &[&["study", "reproduce", "mini"][..], args].concat(),
        );
        assert!(why.contains(said), "{args:?}: {why}");
    }

    // Every check is stored, newest first; the record page shows the newest with the cases
    // that moved, linked.
    let api = http(
        &server.addr,
        "GET",
        "/api/studies/mini/candidates/canned/reproductions",
        &[],
        b"",
    );
    assert_eq!(api.status, 200, "{}", api.body);
    let stored: Value = serde_json::from_str(&api.body).unwrap();
    let stored = stored.as_array().unwrap();
    assert_eq!(stored.len(), 6, "five checks above and the one in words");
    assert_eq!(stored[0]["errors"], 6, "newest first");
    assert_eq!(stored[5]["ok"], true, "{}", stored[5]);
    assert!(stored[0]["stored_at"].as_str().unwrap().ends_with('Z'));
    let page = http(
        &server.addr,
        "GET",
        "/studies/mini/candidates/canned",
        &[],
        b"",
    );
    assert_eq!(page.status, 200);
    let line = page
        .body
        .split("id=\"reproduced\"")
        .nth(1)
        .and_then(|rest| rest.split("</p>").next())
        .unwrap_or_else(|| panic!("the record says whether it reproduced: {}", page.body));
    assert!(
        line.contains("Not asked") && line.contains("6 errors"),
        "{line}"
    );
    assert!(line.contains("0 of 6 answers the same"), "{line}");

    // A generation never checked has none.
    let none = http(
        &server.addr,
        "GET",
        "/api/studies/mini/candidates/canned/reproductions?generation=2",
        &[],
        b"",
    );
    assert_eq!((none.status, none.body.trim()), (200, "[]"));
}

/// The command's refusal on `url` (exit 2): its message.
fn refused_on(url: &str, dir: &std::path::Path, args: &[&str]) -> String {
    let out = shortlist()
        .env("DATABASE_URL", url)
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    stderr(&out)
}
