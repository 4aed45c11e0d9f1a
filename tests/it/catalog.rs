//! What a team keeps besides its studies, from the command line and in the workbench: eval sets
//! stored, listed, exported and removed (`shortlist eval store|list|export|remove`), candidates
//! registered, listed, shown and removed (`shortlist candidate add|list|show|remove`), and the
//! same from the candidate's and the eval set's pages and `DELETE` in the JSON API. What a study
//! version — a draft included — names or pins is kept, with that study named in the refusal;
//! once the draft is deleted it can go.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::{
    data, in_dir as sl, json_in_dir as ok_json, refused_in_dir as refused, stderr, stdout,
};
use crate::web::{Server, form, http};

/// The mini eval set and a changed copy of it (one case's text: another hash), in `dir`.
fn mini_sets(dir: &Path) -> (String, String, String) {
    let yaml = std::fs::read_to_string(data("study/mini.yaml")).unwrap();
    let first = dir.join("mini.yaml");
    std::fs::write(&first, &yaml).unwrap();
    let set = shortlist_evals::EvalSet::from_yaml("mini.yaml", &yaml).unwrap();
    let changed = dir.join("mini-v2.yaml");
    let text = yaml.replacen("Answer with one word.", "Answer in one word.", 1);
    assert_ne!(text, yaml, "a case of the mini set is changed");
    std::fs::write(&changed, text).unwrap();
    (
        first.display().to_string(),
        changed.display().to_string(),
        set.sha256().to_owned(),
    )
}

/// A study file in `dir` over the mini set (`sha256`) with the candidate `smol` at an endpoint.
fn mini_study(dir: &Path, set: &str, sha256: &str) -> String {
    let text = std::fs::read_to_string(data("study/mini.study.toml"))
        .unwrap()
        .replace("@EVALSET@", set)
        .replace("@SHA256@", sha256)
        .replace("@SOURCE@", "http://127.0.0.1:9#nothing");
    let study = dir.join("mini.study.toml");
    std::fs::write(&study, text).unwrap();
    study.display().to_string()
}

#[test]
fn eval_sets_and_candidates_are_kept_and_removed_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (first, changed, sha) = mini_sets(d);

    // Reading commands leave no empty database behind in the wrong folder.
    let why = refused(d, &["candidate", "list"]);
    assert!(why.contains("no database"), "{why}");
    assert!(!d.join("shortlist.db").exists());

    // An eval set stored twice is one version; changed content is the next.
    let v1 = ok_json(d, &["eval", "store", &first, "--json"]);
    assert_eq!(
        (&v1["name"], &v1["version"], &v1["inserted"], &v1["sha256"]),
        (&json!("study-mini"), &json!(1), &json!(true), &json!(sha))
    );
    let again = ok_json(d, &["eval", "store", &first, "--json"]);
    assert_eq!(
        (&again["version"], &again["inserted"]),
        (&json!(1), &json!(false))
    );
    let v2 = ok_json(d, &["eval", "store", &changed, "--json"]);
    assert_eq!((&v2["version"], &v2["inserted"]), (&json!(2), &json!(true)));
    let list = ok_json(d, &["eval", "list", "--json"]);
    let versions: Vec<&Value> = list[0]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| &v["version"])
        .collect();
    assert_eq!(versions, [&json!(1), &json!(2)]);
    assert_eq!(list[0]["versions"][0]["cases"], v1["cases"]);
    // A stored version comes back out exactly as it went in: to stdout, or to a file.
    let out = sl(d, &["eval", "export", "study-mini", "--version", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), std::fs::read_to_string(&first).unwrap());
    let exported = d.join("exported.yaml");
    let out = sl(
        d,
        &[
            "eval",
            "export",
            "study-mini",
            "-o",
            exported.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read(&exported).unwrap(),
        std::fs::read(&changed).unwrap(),
        "the latest version"
    );

    // A file that is not an eval set is refused with its path.
    let bad = d.join("bad.yaml");
    std::fs::write(&bad, "name: x\ncases: 3\n").unwrap();
    let why = refused(d, &["eval", "store", bad.to_str().unwrap()]);
    assert!(why.contains("bad.yaml"), "{why}");

    // A candidate registered, registered again unchanged, listed and shown.
    let add = [
        "candidate",
        "add",
        "spare",
        "http://127.0.0.1:9#spare",
        "--price-per-device-hour",
        "0.5",
        "--json",
    ];
    let added = ok_json(d, &add);
    assert_eq!(
        (&added["name"], &added["version"], &added["inserted"]),
        (&json!("spare"), &json!(1), &json!(true)),
        "{added}"
    );
    // Its endpoint is checked at once: nothing answers there, and it is registered anyway.
    assert_eq!(added["endpoint"]["reached"], false, "{added}");
    assert!(
        added["endpoint"]["problem"].as_str().is_some_and(
            |p| p.starts_with("nothing answers at http://127.0.0.1:9: Connection refused")
        ),
        "{added}"
    );
    assert_eq!(ok_json(d, &add)["inserted"], json!(false));
    // An endpoint that answers and lists the model named is fine; a model it does not list is
    // named before any run asks it for every case.
    let mock = crate::support::Mock::start(&[]);
    let add_endpoint = |name: &str, model: &str| {
        ok_json(
            d,
            &[
                "candidate",
                "add",
                name,
                &format!("{}#{model}", mock.url),
                "--json",
            ],
        )
    };
    let answers = add_endpoint("mocked", "mock");
    assert_eq!(
        (
            &answers["endpoint"]["reached"],
            &answers["endpoint"]["problem"]
        ),
        (&json!(true), &Value::Null),
        "{answers}"
    );
    assert_eq!(answers["endpoint"]["served"], json!(["mock"]), "{answers}");
    let typo = add_endpoint("typo", "mokc");
    assert!(
        typo["endpoint"]["problem"]
            .as_str()
            .is_some_and(|p| p.contains("it lists `mock` and not `mokc`")),
        "{typo}"
    );
    for name in ["mocked", "typo"] {
        ok_json(d, &["candidate", "remove", name, "--json"]);
    }
    let why = refused(
        d,
        &["candidate", "add", "no spaces", "http://127.0.0.1:9#x"],
    );
    assert!(why.contains("the name must be"), "{why}");
    let checked = ok_json(d, &["candidate", "show", "spare", "--check", "--json"]);
    assert_eq!(checked["endpoint"]["reached"], false, "{checked}");
    let shown = ok_json(d, &["candidate", "show", "spare", "--json"]);
    assert!(
        shown.get("endpoint").is_none(),
        "checked only when asked: {shown}"
    );
    let price = shown["identity"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row[0] == "Price per device-hour")
        .map(|row| row[1].clone());
    assert_eq!(price, Some(json!("0.5")));

    // A draft study pins v1 of the set and names `smol`: both are kept, the study named.
    let study = mini_study(d, &first, &sha);
    let out = sl(d, &["study", "create", &study]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let names: Vec<Value> = ok_json(d, &["candidate", "list", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].clone())
        .collect();
    assert_eq!(names, [json!("smol"), json!("spare")]);
    let why = refused(d, &["candidate", "remove", "smol"]);
    assert!(why.contains("study `mini` v1 (draft) names it"), "{why}");
    let why = refused(d, &["eval", "remove", "study-mini", "--version", "1"]);
    assert!(why.contains("study `mini` v1 (draft) pins it"), "{why}");

    // What no study uses goes: the spare candidate whole, the set's v2.
    assert_eq!(
        ok_json(d, &["candidate", "remove", "spare", "--json"]),
        json!({"name": "spare", "versions": [1]})
    );
    let why = refused(d, &["candidate", "show", "spare"]);
    assert!(why.contains("spare"), "{why}");
    let removed = ok_json(d, &["eval", "remove", "study-mini", "--json"]);
    assert_eq!(
        (&removed["version"], &removed["remaining"]),
        (&json!(2), &json!(1))
    );

    // With the draft deleted, nothing holds `smol` or the set's v1 any more.
    let out = sl(d, &["study", "delete", "mini"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    ok_json(d, &["candidate", "remove", "smol", "--json"]);
    let removed = ok_json(d, &["eval", "remove", "study-mini", "--json"]);
    assert_eq!(
        (&removed["version"], &removed["remaining"]),
        (&json!(1), &Value::Null)
    );
    assert_eq!(ok_json(d, &["eval", "list", "--json"]), json!([]));
    assert_eq!(ok_json(d, &["candidate", "list", "--json"]), json!([]));

    // A number names one content for ever: a removed version is named as such, its content
    // stored again gets its number back, and other content a number no version had.
    let why = refused(d, &["eval", "export", "study-mini", "--version", "2"]);
    assert!(why.contains("v2 was removed (it held sha256 "), "{why}");
    let back = ok_json(d, &["eval", "store", &changed, "--json"]);
    assert_eq!(
        (&back["version"], &back["inserted"]),
        (&json!(2), &json!(true))
    );
    let third = d.join("mini-v3.yaml");
    let text = std::fs::read_to_string(&changed).unwrap().replacen(
        "Answer in one word.",
        "Answer with a single word.",
        1,
    );
    std::fs::write(&third, text).unwrap();
    let next = ok_json(d, &["eval", "store", third.to_str().unwrap(), "--json"]);
    assert_eq!(next["version"], json!(3), "{next}");
    let spare = ok_json(
        d,
        &[
            "candidate",
            "add",
            "spare",
            "http://127.0.0.1:9#other",
            "--json",
        ],
    );
    assert_eq!(
        (&spare["name"], &spare["version"], &spare["inserted"]),
        (&json!("spare"), &json!(2), &json!(true)),
        "after v1 was removed: {spare}"
    );
}

#[test]
fn the_workbench_removes_what_no_study_uses_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = Server::start(d, &["--workers", "0", "--schedule-every", "0"], &[]);
    let a = server.addr.as_str();
    let (first, changed, sha) = mini_sets(d);
    for file in [&first, &changed] {
        let yaml = std::fs::read(file).unwrap();
        let stored = http(
            a,
            "POST",
            "/api/evalsets/import?format=shortlist&name=study-mini&store=true",
            &[("content-type", "text/plain")],
            &yaml,
        );
        assert_eq!(stored.status, 200, "{}", stored.body);
    }
    for (name, source) in [("smol", "nothing"), ("spare", "spare")] {
        let body = json!({"name": name, "source": format!("http://127.0.0.1:9#{source}")});
        let r = http(
            a,
            "POST",
            "/api/candidates",
            &[("content-type", "application/json")],
            body.to_string().as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let study = std::fs::read(mini_study(d, &first, &sha)).unwrap();
    let created = http(
        a,
        "POST",
        "/api/studies",
        &[("content-type", "text/plain")],
        &study,
    );
    assert!(created.status < 300, "{}", created.body);

    // Registered again with another source, `smol` has a newer version; the study's page
    // still shows the one its file names, which is what it runs.
    let newer = json!({"name": "smol", "source": "http://127.0.0.1:9#newer"});
    let r = http(
        a,
        "POST",
        "/api/candidates",
        &[("content-type", "application/json")],
        newer.to_string().as_bytes(),
    );
    assert_eq!(r.json()["version"], json!(3), "{}", r.body);
    let shown = http(a, "GET", "/api/studies/mini", &[], b"").json();
    assert_eq!(
        shown["candidates"][0]["stored"]["source"],
        json!("http://127.0.0.1:9#nothing"),
        "{shown}"
    );

    // The pages offer Remove only where no study holds the thing, and say why elsewhere.
    let spare = http(a, "GET", "/candidates/spare", &[], b"").body;
    assert!(
        spare.contains(r#"action="/candidates/spare/remove""#),
        "{spare}"
    );
    assert!(spare.contains("data-confirm="), "{spare}");
    // An endpoint candidate's page offers a check of its endpoint, done when asked (and right
    // after the register form); the API's registration answers with it.
    assert!(
        spare.contains(r#"href="/candidates/spare?check=1" id="check""#)
            && !spare.contains("endpoint-check"),
        "{spare}"
    );
    let api = http(a, "GET", "/api/candidates/spare?check=1", &[], b"").json();
    assert_eq!(api["endpoint"]["reached"], json!(false), "{api}");
    let checked = http(a, "GET", "/candidates/spare?check=1", &[], b"").body;
    assert!(
        checked.contains(r#"id="endpoint-check-spare" class="notice warn""#)
            && checked
                .contains("Checked now: nothing answers at http://127.0.0.1:9: Connection refused"),
        "{checked}"
    );
    assert_eq!(r.json()["endpoint"]["reached"], json!(false), "{}", r.body);
    let form_header = [("content-type", "application/x-www-form-urlencoded")];
    let formed = http(
        a,
        "POST",
        "/candidates",
        &form_header,
        &form(&[("name", "formed"), ("source", "http://127.0.0.1:9#f")]),
    );
    assert_eq!(
        (formed.status, formed.header("location")),
        (303, Some("/candidates/formed?check=1")),
        "{}",
        formed.body
    );
    let gone = http(a, "POST", "/candidates/formed/remove", &form_header, b"");
    assert_eq!(gone.status, 303, "{}", gone.body);
    let smol = http(a, "GET", "/candidates/smol", &[], b"").body;
    assert!(!smol.contains(r#"id="remove""#), "{smol}");
    assert!(
        smol.contains("Remove is offered once no study version names it"),
        "{smol}"
    );
    let pinned = http(a, "GET", "/evalsets/study-mini?version=1", &[], b"").body;
    assert!(!pinned.contains(r#"id="remove""#), "{pinned}");
    assert!(
        pinned.contains("Remove is offered once no study version pins it"),
        "{pinned}"
    );
    let free = http(a, "GET", "/evalsets/study-mini?version=2", &[], b"").body;
    assert!(
        free.contains(r#"action="/evalsets/study-mini/remove""#),
        "{free}"
    );

    // Each version downloads as its file, exactly as stored.
    let link = r#"href="/evalsets/study-mini/evalset.yaml?version=2""#;
    assert!(free.contains(link), "{free}");
    let file = http(
        a,
        "GET",
        "/evalsets/study-mini/evalset.yaml?version=2",
        &[],
        b"",
    );
    assert_eq!(file.status, 200);
    assert_eq!(
        file.header("content-disposition"),
        Some(r#"attachment; filename="study-mini-v2.evalset.yaml""#)
    );
    assert_eq!(file.body, std::fs::read_to_string(&changed).unwrap());

    // A stored version's text opens in the import form, to edit into the next version; a
    // candidate's latest configuration fills the register form in.
    let edit = r#"href="/evalsets/import?from=study-mini&amp;version=1""#;
    assert!(pinned.contains(edit), "{pinned}");
    let form_page = http(
        a,
        "GET",
        "/evalsets/import?from=study-mini&version=1",
        &[],
        b"",
    )
    .body;
    assert!(form_page.contains("name: study-mini"), "{form_page}");
    assert!(
        form_page.contains(r#"<option value="shortlist" selected"#),
        "{form_page}"
    );
    assert!(
        form_page.contains("becomes the set&#x27;s next version")
            || form_page.contains("becomes the set's next version"),
        "{form_page}"
    );
    let again = "/candidates?name=smol&amp;source=http%3A%2F%2F127.0.0.1%3A9%23newer&amp;price=0.0#register";
    assert!(smol.contains(&format!(r#"href="{again}""#)), "{smol}");
    // As a browser sends it: without the fragment.
    let (path, _) = again.rsplit_once('#').unwrap();
    let prefilled = http(a, "GET", &path.replace("&amp;", "&"), &[], b"").body;
    assert!(prefilled.contains(r#"value="0.0""#), "{prefilled}");
    assert!(
        prefilled.contains(r#"value="http://127.0.0.1:9#newer""#),
        "{prefilled}"
    );
    assert!(
        prefilled.contains("smol is registered (3 versions)"),
        "{prefilled}"
    );

    // The buttons remove, and go back to the list or the set's remaining latest version.
    let gone = http(a, "POST", "/candidates/spare/remove", &form_header, b"");
    assert_eq!(
        (gone.status, gone.header("location")),
        (303, Some("/candidates"))
    );
    assert_eq!(http(a, "GET", "/candidates/spare", &[], b"").status, 404);
    let body = form(&[("version", "2")]);
    let gone = http(
        a,
        "POST",
        "/evalsets/study-mini/remove",
        &form_header,
        &body,
    );
    assert_eq!(
        (gone.status, gone.header("location")),
        (303, Some("/evalsets/study-mini"))
    );
    let versions = http(a, "GET", "/api/evalsets", &[], b"").json()[0]["versions"].clone();
    assert_eq!(versions.as_array().map(Vec::len), Some(1));

    // A forged removal of what the draft holds is refused, on the page and in the API.
    let kept = http(a, "POST", "/candidates/smol/remove", &form_header, b"");
    assert_eq!(kept.status, 400, "{}", kept.body);
    assert!(kept.body.contains("names it"), "{}", kept.body);
    let kept = http(a, "DELETE", "/api/evalsets/study-mini?version=1", &[], b"");
    assert_eq!(kept.status, 400, "{}", kept.body);
    assert!(kept.body.contains("pins it"), "{}", kept.body);

    // Once the draft is deleted, the API removes both.
    let del = http(a, "DELETE", "/api/studies/mini", &[], b"");
    assert_eq!(del.status, 200, "{}", del.body);
    // `smol` has three versions: as registered, with the study's price, and the newer source.
    let c = http(a, "DELETE", "/api/candidates/smol", &[], b"");
    assert_eq!(
        (c.status, c.json()),
        (200, json!({"name": "smol", "versions": [1, 2, 3]}))
    );
    let e = http(a, "DELETE", "/api/evalsets/study-mini", &[], b"");
    assert_eq!(e.status, 200, "{}", e.body);
    assert_eq!(
        (&e.json()["version"], &e.json()["remaining"]),
        (&json!(1), &Value::Null)
    );
    let missing = http(a, "DELETE", "/api/candidates/smol", &[], b"");
    assert_eq!(missing.status, 404, "{}", missing.body);
}
