//! What changed between versions. Of an eval set: `shortlist eval diff` (two stored versions, or
//! a file against the stored set of its name), `GET /api/evalsets/{name}/diff`, the
//! `/evalsets/{name}/diff` page, the eval set page's link to it, and the import preview's
//! comparison with the stored version a file would follow. Of a study: `shortlist study diff`,
//! `GET /api/studies/{name}/diff`, the `/studies/{name}/diff` page and the study page's link.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::stderr;
use crate::support::{data, in_dir as sl, json_in_dir as ok_json, refused_in_dir as refused};
use crate::web::{Server, http, multipart};

/// The mini eval set (v1), its next version and a third text, in a folder `files` made in
/// `dir`: v2 changes the set's system prompt (every case's), the `arithmetic` check's value,
/// drops `colour` and adds `greeting`; the third is v2 with its first two cases swapped (the
/// same cases, another order).
fn versions(dir: &Path) -> [String; 3] {
    let dir = dir.join("files");
    std::fs::create_dir_all(&dir).unwrap();
    let v1 = std::fs::read_to_string(data("study/mini.yaml")).unwrap();
    let v2 = v1
        .replacen("Answer briefly.", "Answer in one sentence.", 1)
        .replacen(r#"value: "5""#, r#"value: "five""#, 1)
        .replacen(
            "  - id: colour\n    category: ordinary\n    input: What colour is the sky on a clear day? One word.\n    checks: [{type: contains, value: blue, ignore_case: true}]\n",
            "",
            1,
        )
        + "  - id: greeting\n    category: ordinary\n    input: Say hello.\n    checks: [{type: contains, value: hello, ignore_case: true}]\n";
    assert!(
        !v2.contains("id: colour") && v2.contains("\"five\""),
        "{v2}"
    );
    let capital = "  - id: capital\n    category: ordinary\n    input: What is the capital of France? Answer with one word.\n    checks: [{type: contains, value: Paris, ignore_case: true}]\n";
    let arithmetic = "  - id: arithmetic\n    category: high-value\n    input: What is 2 + 3? Answer with the number only.\n    checks: [{type: contains, value: \"five\"}]\n";
    let swapped = format!("{arithmetic}{capital}");
    let v3 = v2.replacen(&format!("{capital}{arithmetic}"), &swapped, 1);
    assert_ne!(v3, v2, "the first two cases are swapped");
    [v1, v2, v3].map(|text| text.to_owned()).map(|text| {
        let n = dir.read_dir().unwrap().count();
        let path = dir.join(format!("mini-{n}.yaml"));
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    })
}

fn ids(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect()
}

/// v1 → v2 as `versions` makes them: the JSON document's facts.
fn assert_v1_to_v2(d: &Value) {
    assert_eq!(
        (&d["name"], &d["from"]["version"], &d["to"]["version"]),
        (&json!("study-mini"), &json!(1), &json!(2)),
        "{d}"
    );
    assert_eq!(
        (&d["from"]["cases"], &d["to"]["cases"]),
        (&json!(6), &json!(6))
    );
    assert_eq!(ids(&d["added"]), ["greeting"]);
    assert_eq!(ids(&d["removed"]), ["colour"]);
    let kept = [
        "capital",
        "arithmetic",
        "weather-tool",
        "must-answer",
        "must-refuse",
    ];
    assert_eq!(ids(&d["changed"]), kept);
    assert_eq!((&d["same"], &d["reordered"]), (&json!(0), &json!(false)));
    // The system prompt changed once for every case both hold, the check for one.
    let edits = d["edits"].as_array().unwrap();
    assert_eq!(edits.len(), 2, "{d}");
    assert_eq!(edits[0]["field"], json!("system"));
    assert_eq!(
        edits[0]["before"],
        json!("You are a helpful assistant. Answer briefly.")
    );
    assert_eq!(
        edits[0]["after"],
        json!("You are a helpful assistant. Answer in one sentence.")
    );
    assert_eq!(edits[0]["cases"], json!(kept));
    assert_eq!(
        (&edits[1]["field"], &edits[1]["cases"]),
        (&json!("checks.contains"), &json!(["arithmetic"]))
    );
    assert_eq!(
        edits[1]["before"],
        json!(r#"{"type":"contains","value":"5"}"#)
    );
    assert_eq!(
        edits[1]["after"],
        json!(r#"{"type":"contains","value":"five"}"#)
    );
}

#[test]
fn eval_diff_names_what_changed_between_stored_versions_and_what_a_file_would_change() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let [v1, v2, v3] = versions(d);
    ok_json(d, &["eval", "store", &v1, "--json"]);
    // One version: nothing before it to compare with.
    let why = refused(d, &["eval", "diff", "study-mini"]);
    assert!(why.contains("has no version before v1"), "{why}");
    ok_json(d, &["eval", "store", &v2, "--json"]);

    // The latest against the one before it, by default.
    let diff = ok_json(d, &["eval", "diff", "study-mini", "--json"]);
    assert_v1_to_v2(&diff);
    let out = sl(d, &["eval", "diff", "study-mini"]);
    assert_eq!(out.status.code(), Some(0));
    // Backwards, the additions are removals.
    let back = ok_json(
        d,
        &[
            "eval",
            "diff",
            "study-mini",
            "--from",
            "2",
            "--to",
            "1",
            "--json",
        ],
    );
    assert_eq!(
        (ids(&back["added"]), ids(&back["removed"])),
        (vec!["colour"], vec!["greeting"])
    );
    assert_eq!(back["edits"][0]["before"], diff["edits"][0]["after"]);
    // A version against itself: nothing.
    let same = ok_json(
        d,
        &[
            "eval",
            "diff",
            "study-mini",
            "--from",
            "2",
            "--to",
            "2",
            "--json",
        ],
    );
    assert_eq!(
        (
            &same["added"],
            &same["removed"],
            &same["changed"],
            &same["same"]
        ),
        (&json!([]), &json!([]), &json!([]), &json!(6))
    );

    // A file against the stored set of its name: its cases reordered, nothing else.
    let file = ok_json(d, &["eval", "diff", "--file", &v3, "--json"]);
    assert_eq!(
        (&file["from"]["version"], &file["to"]["version"]),
        (&json!(2), &Value::Null)
    );
    assert_eq!(
        (&file["reordered"], &file["same"]),
        (&json!(true), &json!(6))
    );
    assert_eq!(file["changed"], json!([]));
    assert_ne!(file["from"]["sha256"], file["to"]["sha256"]);
    // Against an older version on request.
    let older = ok_json(d, &["eval", "diff", "--file", &v2, "--from", "1", "--json"]);
    assert_eq!(older["edits"], diff["edits"]);

    // What cannot be compared says why.
    let why = refused(d, &["eval", "diff", "study-mini", "--from", "7"]);
    assert!(why.contains("v7"), "{why}");
    let why = refused(d, &["eval", "diff", "study-minj"]);
    assert!(why.contains("did you mean `study-mini`?"), "{why}");
    let other = d.join("files/other.yaml");
    std::fs::write(
        &other,
        std::fs::read_to_string(&v1)
            .unwrap()
            .replacen("name: study-mini", "name: other-set", 1),
    )
    .unwrap();
    let why = refused(d, &["eval", "diff", "--file", other.to_str().unwrap()]);
    assert!(why.contains("no eval set `other-set` is stored"), "{why}");
    // With v1 removed, v2 has no stored version before it.
    ok_json(
        d,
        &["eval", "remove", "study-mini", "--version", "1", "--json"],
    );
    let why = refused(d, &["eval", "diff", "study-mini"]);
    assert!(why.contains("has no version before v2"), "{why}");
}

#[test]
fn the_workbench_shows_what_changed_between_versions_and_what_an_import_would_change() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let [v1, v2, _] = versions(d);
    let server = Server::start(d, &["--workers", "0", "--schedule-every", "0"], &[]);
    let a = server.addr.as_str();
    let import = |path: &str| {
        let r = http(
            a,
            "POST",
            "/api/evalsets/import?format=shortlist&name=study-mini&store=true",
            &[("content-type", "text/plain")],
            &std::fs::read(path).unwrap(),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()
    };
    // The first version has nothing to be compared with; the second says what it changed.
    assert_eq!(import(&v1)["changes"], Value::Null);
    let second = import(&v2);
    assert_eq!(
        (
            &second["changes"]["from"]["version"],
            &second["changes"]["to"]["version"]
        ),
        (&json!(1), &Value::Null)
    );
    assert_eq!(second["changes"]["edits"].as_array().unwrap().len(), 2);

    // The API's document is the command line's.
    let api = http(a, "GET", "/api/evalsets/study-mini/diff", &[], b"");
    assert_eq!(api.status, 200, "{}", api.body);
    assert_v1_to_v2(&api.json());
    let missing = http(a, "GET", "/api/evalsets/study-minj/diff", &[], b"");
    assert_eq!(missing.status, 404, "{}", missing.body);
    assert_eq!(missing.json()["error"]["near"], json!(["study-mini"]));
    let first = http(a, "GET", "/api/evalsets/study-mini/diff?to=1", &[], b"");
    assert_eq!(first.status, 400, "{}", first.body);

    // The set's page links the changes its version made; the first version's does not.
    let page = http(a, "GET", "/evalsets/study-mini?version=2", &[], b"").body;
    assert!(
        page.contains(r#"href="/evalsets/study-mini/diff?from=1&amp;to=2" id="changes""#),
        "{page}"
    );
    let page = http(a, "GET", "/evalsets/study-mini?version=1", &[], b"").body;
    assert!(!page.contains(r#"id="changes""#), "{page}");

    // The changes page: the counts, each list, each change with its words marked.
    let diff = http(a, "GET", "/evalsets/study-mini/diff?from=1&to=2", &[], b"");
    assert_eq!(diff.status, 200, "{}", diff.body);
    let body = diff.body;
    for want in [
        r#"<span class="badge good">1 added</span>"#,
        r#"<span class="badge bad">1 removed</span>"#,
        r#"<span class="badge warn">5 changed</span>"#,
        r#"href="/evalsets/study-mini?version=2&amp;q=greeting#cases" class="mono">greeting</a>"#,
        r#"href="/evalsets/study-mini?version=1&amp;q=colour#cases" class="mono">colour</a>"#,
        "<code>system</code> · 5 cases: ",
        "You are a helpful assistant. Answer <del>briefly</del><ins>in one sentence</ins>.",
        "<del>5</del><ins>five</ins>",
        r#"<option value="1" selected>v1</option>"#,
    ] {
        assert!(body.contains(want), "{want} in {body}");
    }
    // A version that is not stored is a 404 page.
    let gone = http(a, "GET", "/evalsets/study-mini/diff?from=9&to=2", &[], b"");
    assert_eq!(gone.status, 404, "{}", gone.body);

    // A long list stops at 200, saying how many it holds; the API has them all.
    let wide = |n: usize| {
        let mut yaml = String::from("format: shortlist.evalset.v1\nname: wide\ncases:\n");
        for i in 0..n {
            yaml.push_str(&format!(
                "  - {{id: c{i}, category: ordinary, input: Say {i}., checks: [{{type: contains, value: \"{i}\"}}]}}\n"
            ));
        }
        let r = http(
            a,
            "POST",
            "/api/evalsets/import?format=shortlist&name=wide&store=true",
            &[("content-type", "text/plain")],
            yaml.as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.body);
    };
    wide(1);
    wide(251);
    let page = http(a, "GET", "/evalsets/wide/diff", &[], b"").body;
    assert!(page.contains("The first 200 of 250 cases"), "{page}");
    assert_eq!(page.matches("?version=2&amp;q=c").count(), 200, "{page}");
    let api = http(a, "GET", "/api/evalsets/wide/diff", &[], b"").json();
    assert_eq!(api["added"].as_array().unwrap().len(), 250);

    // The import form's preview compares the file with the latest stored version.
    let (kind, body) = multipart(&[
        ("format", "shortlist"),
        ("name", ""),
        ("text", &std::fs::read_to_string(&v1).unwrap()),
        ("action", "preview"),
    ]);
    let preview = http(
        a,
        "POST",
        "/evalsets/import",
        &[("content-type", &kind)],
        &body,
    );
    assert_eq!(preview.status, 200, "{}", preview.body);
    for want in [
        "Against the stored study-mini v2",
        r#"<span class="badge good">1 added</span>"#,
        "Answer <del>in one sentence</del><ins>briefly</ins>.",
    ] {
        assert!(preview.body.contains(want), "{want} in {}", preview.body);
    }
}

/// Two versions of the mini study in `dir`, over the eval set files `v1` and `v2` (their hashes):
/// the second pins `v2`, asks for a first token within 1,500 ms instead of 2,000, lets one
/// high-value failure pass and drops the tool-call rule.
fn study_versions(dir: &Path, v1: &str, v2: &str) -> [String; 2] {
    let sha = |path: &str| {
        let text = std::fs::read_to_string(path).unwrap();
        shortlist_evals::EvalSet::from_yaml(path, &text)
            .unwrap()
            .sha256()
            .to_owned()
    };
    let base = std::fs::read_to_string(data("study/mini.study.toml"))
        .unwrap()
        .replace("@SOURCE@", "http://127.0.0.1:9#nothing");
    let first = base.replace("@EVALSET@", v1).replace("@SHA256@", &sha(v1));
    let second = base
        .replace("@EVALSET@", v2)
        .replace("@SHA256@", &sha(v2))
        .replacen("ttft_ms = 2000", "ttft_ms = 1500", 1)
        .replacen("op = \">\"\nvalue = 0\n", "op = \">\"\nvalue = 1\n", 1)
        .replacen(
            "[[disqualifier]]\nmetric = \"tool_call_errors\"\nop = \">\"\nvalue = 0\n\n",
            "",
            1,
        );
    assert!(
        !second.contains("tool_call_errors") && second.contains("value = 1"),
        "{second}"
    );
    [("mini-1.study.toml", first), ("mini-2.study.toml", second)].map(|(file, text)| {
        let path = dir.join(file);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    })
}

/// v1 → v2 of the mini study as `study_versions` makes them.
fn assert_study_v1_to_v2(d: &Value) {
    assert_eq!(
        (&d["name"], &d["from"]["version"], &d["to"]["version"]),
        (&json!("mini"), &json!(1), &json!(2)),
        "{d}"
    );
    assert!(d["from"]["lock_sha256"].is_string(), "{d}");
    assert_eq!(d["to"]["lock_sha256"], Value::Null, "v2 is a draft");
    let paths: Vec<&str> = d["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "evalset.path",
            "evalset.sha256",
            "slo.ttft_ms",
            "disqualifier[any high-value case failed].value",
            "disqualifier[tool_call_errors]",
        ],
        "{d}"
    );
    let c = &d["changes"];
    assert_eq!(
        (&c[2]["before"], &c[2]["after"]),
        (&json!("2000"), &json!("1500"))
    );
    assert_eq!(c[4]["after"], Value::Null);
    assert_eq!(
        d["evalset"],
        json!({"name": "study-mini", "from": 1, "to": 2}),
        "the eval set pins, for its own changes"
    );
}

#[test]
fn study_diff_names_each_criterion_that_changed_between_versions() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let [v1, v2, _] = versions(d);
    let [first, second] = study_versions(d, &v1, &v2);
    ok_json(d, &["study", "create", &first, "--json"]);
    // One version: nothing before it.
    let why = refused(d, &["study", "diff", "mini"]);
    assert!(why.contains("no version before v1"), "{why}");
    ok_json(d, &["study", "lock", "mini", "--json"]);
    let created = ok_json(d, &["study", "create", &second, "--json"]);
    assert_eq!(created["version"], json!(2), "{created}");

    assert_study_v1_to_v2(&ok_json(d, &["study", "diff", "mini", "--json"]));
    let out = sl(d, &["study", "diff", "mini"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let same = ok_json(
        d,
        &[
            "study", "diff", "mini", "--from", "2", "--to", "2", "--json",
        ],
    );
    assert_eq!(same["changes"], json!([]));
    assert_eq!(same["evalset"], Value::Null);
    let back = ok_json(
        d,
        &[
            "study", "diff", "mini", "--from", "2", "--to", "1", "--json",
        ],
    );
    assert_eq!(back["changes"][2]["after"], json!("2000"));
    let why = refused(d, &["study", "diff", "mini", "--to", "5"]);
    assert!(why.contains("v5"), "{why}");
    let why = refused(d, &["study", "diff", "mino"]);
    assert!(why.contains("did you mean `mini`?"), "{why}");

    // The workbench: the API's document, the page, and the study page's link.
    let url = format!("sqlite://{}?mode=rwc", d.join("shortlist.db").display());
    let server = Server::start_on(&url, d, &["--workers", "0", "--schedule-every", "0"]);
    let a = server.addr.as_str();
    let api = http(a, "GET", "/api/studies/mini/diff", &[], b"");
    assert_eq!(api.status, 200, "{}", api.body);
    assert_study_v1_to_v2(&api.json());
    let page = http(a, "GET", "/studies/mini/diff?from=1&to=2", &[], b"");
    assert_eq!(page.status, 200, "{}", page.body);
    for want in [
        "<code>slo.ttft_ms</code>",
        "<del>2000</del><ins>1500</ins>",
        "<code>disqualifier[tool_call_errors]</code>",
        r#"href="/evalsets/study-mini/diff?from=1&amp;to=2""#,
        r#"<span class="badge warn">5 criteria changed</span>"#,
    ] {
        assert!(page.body.contains(want), "{want} in {}", page.body);
    }
    let study = http(a, "GET", "/studies/mini?version=2", &[], b"").body;
    assert!(
        study.contains(r#"href="/studies/mini/diff?from=1&amp;to=2" id="changes""#),
        "{study}"
    );
    let study = http(a, "GET", "/studies/mini?version=1", &[], b"").body;
    assert!(!study.contains(r#"id="changes""#), "{study}");
    let missing = http(a, "GET", "/api/studies/mino/diff", &[], b"");
    assert_eq!(missing.status, 404, "{}", missing.body);
}
