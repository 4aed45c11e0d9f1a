//! The first study over real HTTP (`shortlist serve` on a fresh SQLite database): the home
//! page's steps to it, and the guided study form. The form says what is missing before anything
//! is stored, offers the stored eval set versions and registered candidates (or a stored study's
//! criteria to start from), refuses a bad form field by field with nothing stored, shows the
//! study file a passing check makes, and saves a study that then locks and runs against the mock
//! to a record; a draft is deleted from its page, a locked version never.

use serde_json::Value;
use shortlist_study::study::Study;

use crate::support::{Mock, data};
use crate::web::{Reply, Server, form, http, status_when_done};

const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");

/// The form's fields for a small study of `candidate` on the eval set `sha256`.
fn fields<'a>(sha256: &'a str, candidate: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("name", "faq"),
        (
            "question",
            "Can the smallest model answer six trivial questions?",
        ),
        ("evalset", sha256),
        ("candidate", candidate),
        ("fallback", "a person answers"),
        ("workload", "uniform"),
        ("requests", "8"),
        ("prompt_tokens", "100"),
        ("output_tokens", "16"),
        ("rate_rps", "8"),
        ("seed", "7"),
        ("slo_name", "interactive"),
        ("ttft_ms", "2000"),
        ("max_itl_ms", "500"),
        ("tpot_ms", ""),
        ("e2e_ms", ""),
        ("ordinary_rps", "0.2"),
        ("peak_rps", "8"),
        ("attainment_target", "0.9"),
        ("context_tokens", "2048"),
        ("concurrency", "4"),
        ("device", "cpu"),
        ("device_memory_gib", "8"),
        ("max_devices", "1"),
        ("currency", "USD"),
        ("rule.0.name", "any high-value case failed"),
        ("rule.0.metric", "high_value_failures"),
        ("rule.0.op", ">"),
        ("rule.0.value", "0"),
        ("rule.3.metric", "memory_fits"),
        ("rule.3.op", "=="),
        ("rule.3.value", "false"),
        ("rule.5.metric", "license"),
        ("rule.5.op", "not_in"),
        ("rule.5.value", "apache-2.0, mit"),
    ]
}

/// `fields` with some replaced (a name given twice: the later wins for text fields).
fn with<'a>(base: &[(&'a str, &'a str)], changes: &[(&'a str, &'a str)]) -> Vec<u8> {
    let mut all: Vec<(&str, &str)> = base
        .iter()
        .filter(|(k, _)| !changes.iter().any(|(c, _)| c == k))
        .copied()
        .collect();
    all.extend_from_slice(changes);
    form(&all)
}

/// The guided form sent.
fn send(a: &str, body: &[u8]) -> Reply {
    http(a, "POST", "/studies/new", &[FORM], body)
}

/// Every study stored, as the API lists them.
fn studies(a: &str) -> Value {
    http(a, "GET", "/api/studies", &[], b"").json()
}

/// The text of the page's study file preview, unescaped.
fn study_file(page: &str) -> String {
    let start = page.find(r#"id="study-file""#).expect("the study file");
    let inner = &page[start..];
    inner[inner.find('>').unwrap() + 1..inner.find("</pre>").unwrap()]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&amp;", "&")
}

#[test]
fn a_study_from_the_guided_form_checks_saves_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mock = Mock::start(&[
        "--answers",
        data("study/mini.answers.jsonl").to_str().unwrap(),
    ]);
    let server = Server::start(d, &["--workers", "1", "--schedule-every", "0"], &[]);
    let a = server.addr.as_str();

    // Nothing stored yet: the home page gives the steps to a first study, none done yet, and
    // the form says what to import and register first, and where.
    let home = http(a, "GET", "/", &[], b"").body;
    assert!(home.contains(r#"id="first-steps""#), "{home}");
    assert!(!home.contains("step done"), "{home}");
    let empty = http(a, "GET", "/studies/new", &[], b"");
    assert_eq!(empty.status, 200);
    assert!(
        empty.body.contains("No eval set is stored yet"),
        "{}",
        empty.body
    );
    assert!(empty.body.contains(r#"href="/evalsets/import""#));
    assert!(empty.body.contains("No candidate is registered yet"));
    // The study file's text page is one tab away, and the edit links still open it.
    let file_tab = http(a, "GET", "/studies/new?as=file", &[], b"");
    assert!(file_tab.body.contains(r#"<textarea id="toml""#));

    // An eval set and a candidate, stored through the API.
    let yaml = std::fs::read_to_string(data("study/mini.yaml")).unwrap();
    let set = http(
        a,
        "POST",
        "/api/evalsets/import?format=shortlist&name=study-mini&store=true",
        &[("content-type", "text/plain")],
        yaml.as_bytes(),
    )
    .json();
    let sha = set["sha256"].as_str().unwrap().to_owned();
    let endpoint = format!("{}#mock", mock.url);
    let registered = http(
        a,
        "POST",
        "/api/candidates",
        &[("content-type", "application/json")],
        serde_json::json!({"name": "smol", "source": endpoint, "price_per_device_hour": 0.05})
            .to_string()
            .as_bytes(),
    );
    assert!(registered.status < 300, "{}", registered.body);
    let home = http(a, "GET", "/", &[], b"").body;
    assert_eq!(home.matches(r#"class="step done""#).count(), 2, "{home}");
    assert!(home.contains("1 registered"), "{home}");
    let page = http(a, "GET", "/studies/new", &[], b"").body;
    assert!(
        page.contains(&format!(r#"<option value="{sha}""#)),
        "{page}"
    );
    assert!(
        page.contains(r#"type="checkbox" id="f-candidate-0" name="candidate" value="smol""#),
        "{page}"
    );
    let base = fields(&sha, "smol");

    // A bad form: every bad field named at once, marked at its input; nothing stored.
    let bad = send(
        a,
        &with(
            &base,
            &[
                ("requests", "eight"),
                ("peak_rps", "0"),
                ("rule.3.op", ">"),
                ("action", "save"),
            ],
        ),
    );
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(
        bad.body.contains("Nothing was stored: 3 things to fix."),
        "{}",
        bad.body
    );
    assert!(
        bad.body.contains("`eight` is not a whole number"),
        "{}",
        bad.body
    );
    assert!(
        bad.body
            .contains(r#"id="f-requests" name="requests" value="eight""#),
        "the form comes back as sent: {}",
        bad.body
    );
    assert!(bad.body.contains(r##"href="#f-rule-4""##), "{}", bad.body);
    assert_eq!(studies(a), Value::Array(vec![]));
    // A candidate that is not registered (a forged form) is refused by name.
    let ghost = send(
        a,
        &with(&base, &[("candidate", "ghost"), ("action", "check")]),
    );
    assert_eq!(ghost.status, 400);
    assert!(
        ghost.body.contains("not registered: ghost"),
        "{}",
        ghost.body
    );

    // Check: the study file it makes, readable as a study; still nothing stored.
    let checked = send(a, &with(&base, &[("action", "check")]));
    assert_eq!(checked.status, 200, "{}", checked.body);
    let text = study_file(&checked.body);
    let study = Study::from_toml("preview", &text).unwrap();
    let f = study.file();
    assert_eq!(f.evalset.sha256, sha);
    assert_eq!(f.workload.input_tokens, Some(800));
    assert_eq!(f.workload.output_tokens, Some(128));
    assert_eq!(f.candidates[0].source, endpoint);
    assert_eq!(
        f.candidates[0].fallback.as_deref(),
        Some("a person answers")
    );
    assert_eq!(study.rules().len(), 3);
    assert_eq!(studies(a), Value::Array(vec![]));

    // Save: 303 to the new study's page, a draft holding what was checked.
    let saved = send(a, &with(&base, &[("action", "save")]));
    assert_eq!(saved.status, 303, "{}", saved.body);
    assert_eq!(saved.header("location"), Some("/studies/faq"));
    let stored = http(a, "GET", "/api/studies/faq", &[], b"").json();
    assert_eq!(stored["state"], "draft", "{stored}");
    assert_eq!(stored["version"], 1);
    assert_eq!(
        Study::from_file(
            "stored",
            serde_json::from_value(stored["study"].clone()).unwrap()
        )
        .unwrap()
        .file(),
        f
    );
    // With a study, the home page lists it instead of the steps.
    assert!(
        !http(a, "GET", "/", &[], b"")
            .body
            .contains(r#"id="first-steps""#)
    );
    // The form makes new studies only: the name is taken now.
    let again = send(a, &with(&base, &[("action", "save")]));
    assert_eq!(again.status, 400);
    assert!(
        again.body.contains("a study named `faq` exists (v1)"),
        "{}",
        again.body
    );

    // A new study filled in from a stored one: everything but its name, as the form's fields.
    let blank = http(a, "GET", "/studies/new", &[], b"").body;
    assert!(
        blank.contains(r#"href="/studies/new?start=faq&amp;version=1""#),
        "{blank}"
    );
    let started = http(a, "GET", "/studies/new?start=faq&version=1", &[], b"");
    assert_eq!(started.status, 200);
    assert!(
        started.body.contains(r#"id="started-from""#),
        "{}",
        started.body
    );
    assert!(
        started.body.contains(r#"id="f-name" name="name" value="""#)
            && started
                .body
                .contains(r#"id="f-prompt_tokens" name="prompt_tokens" value="100""#)
            && started.body.contains(r#"value="smol" checked"#)
            && started
                .body
                .contains(&format!(r#"<option value="{sha}" selected"#)),
        "{}",
        started.body
    );
    assert_eq!(
        http(a, "GET", "/studies/new?start=nothing", &[], b"").status,
        404
    );

    // A draft can be deleted from its page: one made to be thrown away goes, back to the list.
    let page = http(a, "GET", "/studies/faq", &[], b"").body;
    assert!(page.contains(r#"id="delete""#), "{page}");
    let scratch = send(a, &with(&base, &[("name", "scratch"), ("action", "save")]));
    assert_eq!(scratch.status, 303, "{}", scratch.body);
    let deleted = http(
        a,
        "POST",
        "/studies/scratch/delete",
        &[FORM],
        &form(&[("version", "1")]),
    );
    assert_eq!(deleted.status, 303, "{}", deleted.body);
    assert_eq!(deleted.header("location"), Some("/"));
    assert_eq!(http(a, "GET", "/api/studies/scratch", &[], b"").status, 404);

    // It is an ordinary study: locked and run, it ends in a record judged by its rules.
    assert_eq!(
        http(a, "POST", "/api/studies/faq/lock", &[], b"").status,
        200
    );
    let run = http(a, "POST", "/api/studies/faq/runs", &[], b"");
    assert!(run.status < 300, "{}", run.body);
    let status = status_when_done(a, "/api/studies/faq/status");
    assert_eq!(status["state"], "done", "{status}");
    // A locked version is never deleted: its criteria are what its record was judged by.
    let kept = http(a, "DELETE", "/api/studies/faq?version=1", &[], b"");
    assert_eq!(kept.status, 400, "{}", kept.body);
    assert!(kept.body.contains("is locked"), "{}", kept.body);
    assert!(
        !http(a, "GET", "/studies/faq", &[], b"")
            .body
            .contains(r#"id="delete""#)
    );
    let record = http(
        a,
        "GET",
        "/api/studies/faq/candidates/smol/record",
        &[],
        b"",
    )
    .json();
    assert_eq!(
        record["disqualifiers"].as_array().map(Vec::len),
        Some(3),
        "{record}"
    );
    assert!(
        ["qualifies", "disqualified", "incomplete"].contains(&record["verdict"].as_str().unwrap()),
        "{record}"
    );
}
