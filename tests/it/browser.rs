//! The workbench in a real browser (Debian's chromium through chromedriver, driven by
//! fantoccini): a study created from the form, locked, run against two mock candidates with
//! canned answers, the progress followed to done without a reload, the comparison with its
//! disagreement filter, a case, the one-page PDF; an XSS payload that never runs; and a
//! screenshot of each page at 1280 and 390 px, written to `$CARGO_TARGET_TMPDIR/screenshots`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::support::{Mock, data};
use crate::web::{Server, http, study_text};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// chromedriver on a free port; killed when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn driver() -> Option<Driver> {
    if !Path::new(CHROMIUM).exists() || !Path::new(CHROMEDRIVER).exists() {
        eprintln!(
            "SKIPPED: {CHROMIUM} or {CHROMEDRIVER} is absent (scripts/test installs chromium and chromium-driver)"
        );
        return None;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(Driver { child, url })
}

async fn browser(driver: &Driver, profile: &Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".to_owned(),
        json!({
            "binary": CHROMIUM,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a chromium session")
}

fn shots_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Screenshots of the current page at 1280 and 390 px wide; the page must not scroll sideways.
async fn shoot(c: &Client, name: &str) {
    for width in [1280u32, 390] {
        c.set_window_size(width, 900).await.unwrap();
        let overflow = c
            .execute(
                "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
                vec![],
            )
            .await
            .unwrap();
        assert!(
            overflow.as_i64().unwrap_or(0) <= 0,
            "{name} scrolls sideways at {width} px by {overflow}"
        );
        // Tables of records (studies, eval sets, candidates, schedules, jobs, runs, rules,
        // latencies) on a phone: each row's cells stack across the whole width, but for short
        // values side by side (`inline`), so no column is squeezed to a few letters a line or
        // hidden in a box that scrolls sideways.
        if width == 390 {
            let narrow = c
                .execute(
                    "return [...document.querySelectorAll('table.cards td:not(.inline)')]
                       .filter(td => td.getClientRects().length > 0
                         && td.getBoundingClientRect().width < 0.9 * td.closest('table').parentElement.clientWidth)
                       .map(td => (td.dataset.label || 'first') + ': ' + Math.round(td.getBoundingClientRect().width) + ' px');",
                    vec![],
                )
                .await
                .unwrap();
            assert_eq!(
                narrow,
                json!([]),
                "{name}: cells of a list squeezed side by side at {width} px"
            );
            // No table anywhere squeezes a column of text into a tower: text in a cell under half
            // its box's width and taller than ten lines reads a word a line.
            let towers = c
                .execute(
                    "return [...document.querySelectorAll('td, th')]
                       .map(td => {
                         const text = document.createRange();
                         text.selectNodeContents(td);
                         const r = text.getBoundingClientRect();
                         const box = td.closest('table').parentElement.clientWidth;
                         const line = parseFloat(getComputedStyle(td).lineHeight) || 20;
                         return r.width < 0.5 * box && r.height > 10 * line
                           ? td.textContent.trim().slice(0, 40) + ': ' + Math.round(r.width)
                             + ' × ' + Math.round(r.height) + ' px'
                           : null;
                       })
                       .filter(t => t);",
                    vec![],
                )
                .await
                .unwrap();
            assert_eq!(
                towers,
                json!([]),
                "{name}: a column squeezed into a tower at {width} px"
            );
        }
        let full_height = c
            .execute("return document.documentElement.scrollHeight;", vec![])
            .await
            .unwrap()
            .as_u64()
            .unwrap_or(900)
            .clamp(600, 6000) as u32;
        c.set_window_size(width, full_height).await.unwrap();
        let png = c.screenshot().await.unwrap();
        std::fs::write(shots_dir().join(format!("{name}-{width}.png")), png).unwrap();
    }
    c.set_window_size(1280, 900).await.unwrap();
}

/// Click what `locator` finds.
async fn click(c: &Client, locator: Locator<'_>) {
    c.find(locator).await.unwrap().click().await.unwrap();
}

async fn text_of(c: &Client, css: &str) -> String {
    c.find(Locator::Css(css))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_study_from_the_form_to_the_pdf_in_chromium() {
    let Some(driver) = driver() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Two candidates: the canned answers, and the same with a wrong capital.
    let wrong = d.join("wrong.jsonl");
    std::fs::write(
        &wrong,
        std::fs::read_to_string(data("study/mini.answers.jsonl"))
            .unwrap()
            .replace("\"Paris.\"", "\"Lyon.\""),
    )
    .unwrap();
    let good = Mock::start(&[
        "--answers",
        data("study/mini.answers.jsonl").to_str().unwrap(),
        "--ttft-ms",
        "300",
    ]);
    let other = Mock::start(&["--answers", wrong.to_str().unwrap(), "--ttft-ms", "300"]);
    let payload = "<script>alert(1)</script>\"><img src=x onerror=alert(2)>";
    let text = study_text(d, &format!("{}#mock", good.url)).replace(
        "Can the smallest model answer six trivial questions?",
        &payload.replace('"', "\\\""),
    ) + &format!(
        "\n[[candidate]]\nname = \"other\"\nsource = \"{}#mock\"\nprice_per_device_hour = 0.05\n",
        other.url
    );
    // The test ticks the schedule at past instants itself: no scheduler racing it in real time.
    let server = Server::start(d, &["--workers", "1", "--schedule-every", "0"], &[]);
    let base = format!("http://{}", server.addr);
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;

    // Create from the form.
    c.goto(&format!("{base}/studies/new?as=file"))
        .await
        .unwrap();
    shoot(&c, "new-study").await;
    c.execute(
        "document.getElementById('toml').value = arguments[0];",
        vec![json!(text)],
    )
    .await
    .unwrap();
    click(&c, Locator::Css("form button[type=submit]")).await;
    c.wait()
        .for_url(&format!("{base}/studies/mini").parse().unwrap())
        .await
        .unwrap();
    assert_eq!(text_of(&c, "#study-state").await, "draft");
    // The payload in the question is text, not markup: no dialog opened (WebDriver would fail
    // every command with "unexpected alert open"), and the only script is ours.
    let scripts = c
        .execute("return document.scripts.length;", vec![])
        .await
        .unwrap();
    assert_eq!(scripts, json!(1));
    assert!(
        text_of(&c, ".question")
            .await
            .contains("<script>alert(1)</script>")
    );

    // Lock, then Run; follow the progress to done without a reload.
    click(&c, Locator::Css("form[action$='/lock'] button")).await;
    c.wait().for_element(Locator::Id("run")).await.unwrap();
    click(&c, Locator::Id("run")).await;
    c.wait()
        .for_element(Locator::Css("tr[data-job]"))
        .await
        .unwrap();
    c.execute("window.__stayed = true;", vec![]).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let state = text_of(&c, "#study-state").await;
        if state == "done" {
            break;
        }
        assert!(Instant::now() < deadline, "the run did not finish: {state}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let stayed = c
        .execute("return window.__stayed === true;", vec![])
        .await
        .unwrap();
    assert_eq!(
        stayed,
        json!(true),
        "the page followed the run without a reload"
    );
    let bars = c
        .execute(
            "return Array.from(document.querySelectorAll('progress')).map(p => p.value);",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        bars.as_array()
            .unwrap()
            .iter()
            .all(|v| v.as_f64() == Some(1.0)),
        "{bars}"
    );
    c.goto(&format!("{base}/studies/mini")).await.unwrap();
    // Opened on a finished study, the page says nothing is running (and still listens).
    let quiet = "No run in progress; a new one will show here as it runs.";
    let deadline = Instant::now() + Duration::from_secs(20);
    while text_of(&c, "#live").await != quiet {
        assert!(Instant::now() < deadline, "{}", text_of(&c, "#live").await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    shoot(&c, "study").await;

    // Compare both candidates: the disagreement is the capital.
    c.goto(&format!(
        "{base}/studies/mini/compare?candidates=smol,other"
    ))
    .await
    .unwrap();
    assert_eq!(text_of(&c, "#case-count").await, "1 of 6 cases");
    assert!(text_of(&c, "table.cases").await.contains("capital"));
    assert!(c.find(Locator::Css("table.compare")).await.is_ok());
    // Four overlaid charts, each drawn (an SVG with both candidates named in it).
    let charts = c
        .execute(
            "return Array.from(document.querySelectorAll('figure.chart svg')).map(s => s.textContent);",
            vec![],
        )
        .await
        .unwrap();
    let charts = charts.as_array().unwrap();
    assert_eq!(charts.len(), 4, "{charts:?}");
    for chart in &charts[..3] {
        let text = chart.as_str().unwrap();
        assert!(text.contains("smol") && text.contains("other"), "{text}");
    }
    shoot(&c, "compare").await;
    click(&c, Locator::LinkText("all")).await;
    c.wait()
        .for_element(Locator::Css("table.cases"))
        .await
        .unwrap();
    assert_eq!(text_of(&c, "#case-count").await, "6 of 6 cases");

    // A case: each candidate's output and checks.
    c.goto(&format!("{base}/studies/mini/cases/capital"))
        .await
        .unwrap();
    let page = text_of(&c, "main").await;
    assert!(page.contains("Paris.") && page.contains("Lyon."), "{page}");
    shoot(&c, "case").await;

    // The record page and its PDF (one page).
    c.goto(&format!("{base}/studies/mini/candidates/smol"))
        .await
        .unwrap();
    assert!(text_of(&c, ".verdict").await.contains("DISQUALIFIED"));
    shoot(&c, "record").await;
    c.goto(&format!("{base}/")).await.unwrap();
    shoot(&c, "home").await;
    // The workbench's own worker, idle now, with its machine; nothing stranded in the queue.
    c.goto(&format!("{base}/workers")).await.unwrap();
    let workers = text_of(&c, "#workers").await;
    assert!(
        workers.contains("idle") && workers.contains("backend"),
        "{workers}"
    );
    assert!(c.find(Locator::Id("stranded")).await.is_err());
    shoot(&c, "workers").await;

    // Eval sets: the study's, and one imported from promptfoo with a preview first.
    c.goto(&format!("{base}/evalsets/import")).await.unwrap();
    let promptfoo = std::fs::read_to_string(data("eval/promptfoo.yaml")).unwrap();
    c.execute(
        "document.getElementById('text').value = arguments[0]; document.getElementById('name').value = 'imported';",
        vec![json!(promptfoo)],
    )
    .await
    .unwrap();
    click(&c, Locator::Css("button[value=preview]")).await;
    c.wait().for_element(Locator::Css("dl.grid")).await.unwrap();
    assert!(text_of(&c, "main").await.contains("Unmapped: "));
    shoot(&c, "import-preview").await;
    click(&c, Locator::Css("button[value=store]")).await;
    c.wait().for_element(Locator::Css(".ok-box")).await.unwrap();
    c.goto(&format!("{base}/evalsets")).await.unwrap();
    let sets = text_of(&c, "main").await;
    assert!(sets.contains("imported") && sets.contains("mini"), "{sets}");
    shoot(&c, "evalsets").await;
    c.goto(&format!("{base}/evalsets/study-mini"))
        .await
        .unwrap();
    assert!(text_of(&c, "main").await.contains("capital"));
    shoot(&c, "evalset").await;
    // The imported set, which no study pins, is removed from its page after the confirmation.
    c.goto(&format!("{base}/evalsets/imported")).await.unwrap();
    shoot(&c, "evalset-removable").await;
    click(&c, Locator::Id("remove")).await;
    let question = c.get_alert_text().await.unwrap();
    assert!(question.starts_with("Remove imported v1"), "{question}");
    c.accept_alert().await.unwrap();
    c.wait()
        .for_url(&format!("{base}/evalsets").parse().unwrap())
        .await
        .unwrap();
    let left = text_of(&c, "main").await;
    assert!(
        !left.contains("imported") && left.contains("study-mini"),
        "{left}"
    );

    // Candidates: both of the study's, with their verdicts; one in full.
    c.goto(&format!("{base}/candidates")).await.unwrap();
    let list = text_of(&c, "main").await;
    assert!(list.contains("smol") && list.contains("other"), "{list}");
    shoot(&c, "candidates").await;
    c.goto(&format!("{base}/candidates/smol")).await.unwrap();
    assert!(text_of(&c, "main").await.contains("Endpoint model id"));
    shoot(&c, "candidate").await;

    // Workloads: a public trace pasted, previewed with its arrivals chart, then stored.
    c.goto(&format!("{base}/workloads")).await.unwrap();
    let azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
        2023-11-16 18:15:46.0000000,120,8\n2023-11-16 18:15:46.5000000,90,12\n\
        2023-11-16 18:15:47.0000000,200,6\n2023-11-16 18:15:49.2500000,60,10\n\
        2023-11-16 18:15:52.0000000,150,8\n2023-11-16 18:15:52.5000000,80,9\n";
    c.execute(
        "document.getElementById('text').value = arguments[0]; \
         document.getElementById('name').value = 'support-traffic'; \
         document.getElementById('format').value = 'azure';",
        vec![json!(azure)],
    )
    .await
    .unwrap();
    click(&c, Locator::Css("button[value=preview]")).await;
    c.wait().for_element(Locator::Id("preview")).await.unwrap();
    let preview = text_of(&c, "#preview").await;
    assert!(preview.contains("Preview: support-traffic"), "{preview}");
    assert!(
        c.find(Locator::Css("#preview figure[data-chart=arrivals] svg"))
            .await
            .is_ok()
    );
    shoot(&c, "workloads-preview").await;
    click(&c, Locator::Css("button[value=store]")).await;
    c.wait().for_element(Locator::Css(".ok-box")).await.unwrap();
    c.goto(&format!("{base}/workloads")).await.unwrap();
    assert!(text_of(&c, "main").await.contains("support-traffic v1"));
    shoot(&c, "workloads").await;

    // The guided form: Check with nothing filled names what is missing at each field; filled
    // in (the stored eval set, one candidate ticked), Check shows the study file, and Save
    // draft stores it as a new study.
    c.goto(&format!("{base}/studies/new")).await.unwrap();
    shoot(&c, "guided-form").await;
    click(&c, Locator::Css("button[value=check]")).await;
    // The click submits the form: wait for the answer page, not the form still shown.
    c.wait()
        .for_element(Locator::Css(".error-box"))
        .await
        .unwrap();
    let refused = text_of(&c, ".error-box").await;
    assert!(
        refused.contains("Study name: a study needs a name"),
        "{refused}"
    );
    assert!(
        refused.contains("Eval set version: choose the eval set version"),
        "{refused}"
    );
    shoot(&c, "guided-errors").await;
    c.find(Locator::Css("#f-name"))
        .await
        .unwrap()
        .send_keys("from-the-form")
        .await
        .unwrap();
    c.find(Locator::Css("#f-question"))
        .await
        .unwrap()
        .send_keys("Does the mock answer within the SLO?")
        .await
        .unwrap();
    c.execute(
        "const s = document.getElementById('f-evalset'); s.value = Array.from(s.options).find(o => o.text.includes('study-mini')).value;",
        vec![],
    )
    .await
    .unwrap();
    click(&c, Locator::Css("input[name=candidate][value=smol]")).await;
    click(&c, Locator::Css("button[value=check]")).await;
    // The checked form is a new page: wait for it rather than read the one being left.
    c.wait()
        .for_element(Locator::Css("#study-file"))
        .await
        .unwrap();
    assert!(
        text_of(&c, "#study-file")
            .await
            .contains("name = \"from-the-form\"")
    );
    shoot(&c, "guided-checked").await;
    click(&c, Locator::Css("button[value=save]")).await;
    c.wait()
        .for_url(&format!("{base}/studies/from-the-form").parse().unwrap())
        .await
        .unwrap();
    assert_eq!(text_of(&c, "#study-state").await, "draft");
    // A new study filled in from that one: everything but its name.
    c.goto(&format!("{base}/studies/new?start=from-the-form"))
        .await
        .unwrap();
    assert!(
        text_of(&c, "#started-from")
            .await
            .contains("from-the-form v1")
    );
    let question = c
        .execute(
            "return document.getElementById('f-question').value;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(question, json!("Does the mock answer within the SLO?"));
    shoot(&c, "guided-started").await;

    // A week of a nightly schedule, quality and load: one night missed and caught up once, a
    // night where `smol` loses its high-value case (its mock answers the sum wrongly that
    // night), and a last night on another machine (more compute threads) with nothing else
    // changed.
    // Mocks exit after a minute: each night starts its own, at the candidates' addresses.
    let good_addr = good.url.trim_start_matches("http://").to_owned();
    let other_addr = other.url.trim_start_matches("http://").to_owned();
    drop(good);
    drop(other);
    let canned = std::fs::read_to_string(data("study/mini.answers.jsonl")).unwrap();
    let fixed = d.join("fixed.jsonl");
    std::fs::write(
        &fixed,
        canned.replace("The answer is 7.", "The answer is 5."),
    )
    .unwrap();
    let start = |addr: &str, file: &Path| {
        Mock::start_at(
            addr,
            &["--answers", file.to_str().unwrap(), "--ttft-ms", "300"],
        )
    };
    let db = format!("sqlite://{}?mode=rwc", d.join("web.db").display());
    let cli = |args: &[&str]| crate::support::ok_on_db(&db, d, args);
    cli(&[
        "schedule",
        "add",
        "nightly",
        "--study",
        "mini",
        "--cron",
        "0 3 * * *",
        "--tz",
        "Europe/Berlin",
        "--from",
        "2026-11-24T00:00:00Z",
    ]);
    let mut server = server;
    let mut base = base;
    for at in [
        "2026-11-25",
        "2026-11-26",
        "2026-11-27",
        "2026-11-29",
        "2026-11-30",
        "2026-12-01",
    ] {
        let smol_answers = if at == "2026-11-27" {
            data("study/mini.answers.jsonl")
        } else {
            fixed.clone()
        };
        let _mocks = (start(&good_addr, &smol_answers), start(&other_addr, &wrong));
        if at == "2026-12-01" {
            drop(server);
            server = Server::start(
                d,
                &["--workers", "1", "--schedule-every", "0"],
                &[("CANDLE_NUM_THREADS", "3")],
            );
            base = format!("http://{}", server.addr);
        }
        cli(&["schedule", "tick", "--at", &format!("{at}T02:30:00Z")]);
        // The workbench's worker runs each night before the next.
        let deadline = Instant::now() + Duration::from_secs(180);
        while http(&server.addr, "GET", "/api/studies/mini/status", &[], b"").json()["state"]
            != "done"
        {
            assert!(
                Instant::now() < deadline,
                "the scheduled run did not finish"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    // A pass after the last night checks it.
    cli(&["schedule", "tick", "--at", "2026-12-01T12:00:00Z"]);
    c.goto(&format!("{base}/schedules/nightly")).await.unwrap();
    let page = text_of(&c, "main").await;
    assert!(
        page.contains("skipped") && page.contains("started"),
        "{page}"
    );
    let runs = http(&server.addr, "GET", "/api/schedules/nightly", &[], b"").json()["runs"].clone();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 12, "six nights x two candidates: {runs:?}");
    let smol = |due: &str| {
        runs.iter()
            .find(|r| r["candidate"] == "smol" && r["due"].as_str().unwrap().starts_with(due))
            .unwrap()
    };
    assert_eq!(
        smol("2026-11-27")["check"],
        "regression",
        "{}",
        smol("2026-11-27")
    );
    assert_eq!(
        smol("2026-11-30")["check"],
        "ok",
        "{}\n{}",
        smol("2026-11-30"),
        http(&server.addr, "GET", "/api/studies/mini/status", &[], b"").body
    );
    assert_eq!(smol("2026-12-01")["what_changed"], "machine");
    assert!(smol("2026-12-01")["attainment_interval"]["lo"].is_number());
    for chart in [
        "history-pass",
        "history-attainment",
        "history-ttft",
        "history-goodput",
    ] {
        assert!(
            c.find(Locator::Css(&format!("figure[data-chart={chart}] svg")))
                .await
                .is_ok(),
            "{chart}"
        );
    }
    assert!(page.contains("only the machine"), "{page}");
    // The fingerprints read as a ledger: the machine's change is shown and marked on the last
    // night only; the nights before it say "same" for the machine.
    let changed = c
        .execute(
            "return [...document.querySelectorAll('td.changed')].map(td => td.textContent);",
            vec![],
        )
        .await
        .unwrap();
    let changed: Vec<&str> = changed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        changed.len(),
        2,
        "the machine, for each candidate: {changed:?}"
    );
    assert!(
        changed.iter().all(|t| t.contains("compute threads")),
        "{changed:?}"
    );
    let same = c
        .execute(
            "return document.querySelectorAll('td.same').length;",
            vec![],
        )
        .await
        .unwrap();
    // Six nights x two candidates; each candidate's five later nights have seven cells, of
    // which the last night's machine changed: 2 x (5 x 7 - 1).
    assert_eq!(
        same,
        json!(68),
        "cells said to be the same as the night before"
    );
    shoot(&c, "schedule").await;
    // Two nights in full: their rows, the fingerprints of those two and of each candidate's
    // first night (nothing changed on the nights between), the two newest due instants, and a
    // link to all six; the charts keep every night.
    c.goto(&format!("{base}/schedules/nightly?nights=2"))
        .await
        .unwrap();
    let count = "return ['#nights tbody tr', '#fingerprints tbody tr', '#fingerprints td.changed', \
                 '#due tbody tr', 'a[href=\"/schedules/nightly?nights=6#nights\"]'] \
                 .map(s => document.querySelectorAll(s).length);";
    let counts = c.execute(count, vec![]).await.unwrap();
    assert_eq!(counts, json!([4, 6, 2, 2, 1]), "rows shown with two nights");
    shoot(&c, "schedule-two-nights").await;
    click(&c, Locator::Css("#nights p.more a")).await;
    let all = format!("{base}/schedules/nightly?nights=6#nights");
    c.wait().for_url(&all.parse().unwrap()).await.unwrap();
    let counts = c.execute(count, vec![]).await.unwrap();
    let shown: Vec<&Value> = counts.as_array().unwrap().iter().take(3).collect();
    assert_eq!(
        shown,
        [&json!(12), &json!(12), &json!(2)],
        "with all six nights"
    );
    assert_eq!(counts[4], 0, "no link to more");

    // A schedule added from the form — the study page's link chooses the study, the zone is the
    // browser's — and removed after the confirmation the script asks for.
    c.goto(&format!("{base}/studies/mini")).await.unwrap();
    click(&c, Locator::LinkText("Run it on a schedule…")).await;
    c.wait()
        .for_element(Locator::Css("form[action='/schedules']"))
        .await
        .unwrap();
    let chosen = c
        .execute(
            "return [document.getElementById('sstudy').value, document.getElementById('stz').value, Intl.DateTimeFormat().resolvedOptions().timeZone];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(chosen[0], "mini", "{chosen}");
    assert_eq!(chosen[1], chosen[2], "the browser's zone: {chosen}");
    shoot(&c, "schedules").await;
    c.execute(
        "document.getElementById('sname').value = 'weekly'; document.getElementById('scron').value = '@weekly';",
        vec![],
    )
    .await
    .unwrap();
    click(&c, Locator::Css("#add button[type=submit]")).await;
    let weekly = format!("{base}/schedules/weekly");
    c.wait().for_url(&weekly.parse().unwrap()).await.unwrap();
    assert!(text_of(&c, "main").await.contains("@weekly"));
    // Dismissed, nothing is removed; accepted, the schedule goes.
    click(&c, Locator::Css("button.danger")).await;
    let question = c.get_alert_text().await.unwrap();
    assert!(
        question.starts_with("Remove the schedule weekly?"),
        "{question}"
    );
    c.dismiss_alert().await.unwrap();
    assert_eq!(c.current_url().await.unwrap().as_str(), weekly);
    click(&c, Locator::Css("button.danger")).await;
    c.accept_alert().await.unwrap();
    c.wait()
        .for_url(&format!("{base}/schedules").parse().unwrap())
        .await
        .unwrap();
    let left = text_of(&c, "main table").await;
    assert!(
        left.contains("nightly") && !left.contains("weekly"),
        "{left}"
    );

    // A finished run accepted as the baseline from its generation's card.
    c.goto(&format!("{base}/studies/mini")).await.unwrap();
    let offered = c
        .find_all(Locator::Css(".generation-head button"))
        .await
        .unwrap()
        .len();
    assert!(offered >= 1, "no finished generation offers itself");
    click(&c, Locator::Css(".generation-head button")).await;
    c.wait()
        .for_element(Locator::Css(".generation-head .badge.good"))
        .await
        .unwrap();
    assert_eq!(
        c.find_all(Locator::Css(".generation-head button"))
            .await
            .unwrap()
            .len(),
        offered - 1
    );
    shoot(&c, "study-baseline").await;

    // Criteria changed from the study page: the form holds v1's text; saved changed, it is v2, a
    // draft, with both versions a click apart; v1 keeps its runs, and each of its generations
    // links its own records.
    click(&c, Locator::Id("edit")).await;
    c.wait()
        .for_element(Locator::Id("consequence"))
        .await
        .unwrap();
    assert!(
        text_of(&c, "#consequence")
            .await
            .contains("Saving a changed copy stores mini v2"),
    );
    shoot(&c, "edit-study").await;
    let edited = c
        .execute(
            "const t = document.getElementById('toml'); const before = t.value; \
             t.value = before.replace('ttft_ms = 2000', 'ttft_ms = 1800'); return before !== t.value;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(edited, json!(true), "the stored text holds the SLO");
    click(&c, Locator::Css("form button[type=submit]")).await;
    c.wait()
        .for_url(&format!("{base}/studies/mini").parse().unwrap())
        .await
        .unwrap();
    assert_eq!(text_of(&c, "h1").await, "mini v2 draft");
    assert_eq!(text_of(&c, "nav.tabs .tab.active").await, "v2 · draft");
    shoot(&c, "study-v2").await;
    click(&c, Locator::Css("nav.tabs a.tab")).await;
    c.wait()
        .for_element(Locator::Id("newer-version"))
        .await
        .unwrap();
    assert!(text_of(&c, "h1").await.starts_with("mini v1"));
    shoot(&c, "study-v1-of-2").await;
    let record_links = c
        .find_all(Locator::Css(".records a:not(.small)"))
        .await
        .unwrap()
        .len();
    assert!(record_links >= 2, "{record_links} record links");
    // Generations are listed newest first, the five newest in full and the others a row each
    // under Earlier generations: the last record link there is generation 1's.
    let earlier = c
        .find_all(Locator::Css("#earlier tbody tr"))
        .await
        .unwrap()
        .len();
    assert!(earlier >= 1, "{earlier} earlier generations");
    c.execute(
        "const links = document.querySelectorAll('#earlier ul a'); links[links.length - 1].click();",
        vec![],
    )
    .await
    .unwrap();
    c.wait()
        .for_element(Locator::Css(".verdict"))
        .await
        .unwrap();
    assert!(text_of(&c, ".crumbs").await.contains("generation 1"));
    c.close().await.unwrap();
    // A first version's record has no earlier criteria to link.
    let page = http(
        &server.addr,
        "GET",
        "/studies/mini/candidates/smol?version=1",
        &[],
        b"",
    );
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("criteria-changes"), "{}", page.body);

    let pdf = http(
        &server.addr,
        "GET",
        "/studies/mini/candidates/smol/record.pdf?version=1",
        &[],
        b"",
    );
    assert_eq!(pdf.header("content-type"), Some("application/pdf"));
    assert!(pdf.body.starts_with("%PDF"), "a PDF");
    assert_eq!(
        crate::report::page_objects(pdf.body.as_bytes()),
        1,
        "exactly one page"
    );
}

/// A trace past the upload limit: the page's script refuses the file before a byte is sent, and
/// a browser that sends it anyway (no script) gets the workbench's page naming the limit, not a
/// broken connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_past_the_limit_is_refused_before_it_is_sent_and_after() {
    let Some(driver) = driver() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = Server::start(
        d,
        &[
            "--workers",
            "0",
            "--schedule-every",
            "0",
            "--max-trace-bytes",
            "400000",
        ],
        &[],
    );
    let base = format!("http://{}", server.addr);
    let (day, week) = (d.join("day.trace.jsonl"), d.join("week.trace.jsonl"));
    std::fs::write(&day, crate::workloads::trace_of(2_000)).unwrap();
    std::fs::write(&week, crate::workloads::trace_of(200_000)).unwrap();
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    c.goto(&format!("{base}/workloads")).await.unwrap();
    let validity = "return document.getElementById('file').validationMessage;";

    // Chosen, the large file is refused at once; Preview sends nothing.
    let input = c.find(Locator::Id("file")).await.unwrap();
    input.send_keys(week.to_str().unwrap()).await.unwrap();
    let message = c.execute(validity, vec![]).await.unwrap();
    let message = message.as_str().unwrap_or_default();
    assert!(
        message.starts_with("week.trace.jsonl is 16.4 MiB, more than the 400000 bytes")
            && message.contains("shortlist trace store FILE"),
        "{message}"
    );
    click(&c, Locator::Css("button[value=preview]")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sent = c
        .execute(
            "return !!document.querySelector('#preview, .error-box');",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(sent, json!(false), "the large file was sent");
    shoot(&c, "workloads-file-too-large").await;

    // A file within the limit is sent and previewed.
    let input = c.find(Locator::Id("file")).await.unwrap();
    input.clear().await.unwrap();
    input.send_keys(day.to_str().unwrap()).await.unwrap();
    assert_eq!(c.execute(validity, vec![]).await.unwrap(), json!(""));
    click(&c, Locator::Css("button[value=preview]")).await;
    c.wait().for_element(Locator::Id("preview")).await.unwrap();

    // Sent without the script's check, the large file gets the server's refusal in the page.
    let input = c.find(Locator::Id("file")).await.unwrap();
    input.clear().await.unwrap();
    input.send_keys(week.to_str().unwrap()).await.unwrap();
    c.execute(
        "const i = document.getElementById('file'); i.setCustomValidity(''); i.form.submit();",
        vec![],
    )
    .await
    .unwrap();
    c.wait()
        .for_element(Locator::Css(".error-box"))
        .await
        .unwrap();
    let refusal = text_of(&c, ".error-box").await;
    assert!(
        refusal.contains("400000 bytes at most")
            && refusal.contains("shortlist serve --max-trace-bytes BYTES"),
        "{refusal}"
    );
    assert!(c.find(Locator::Id("preview")).await.is_err());
    shoot(&c, "workloads-refused-as-too-large").await;
    c.close().await.unwrap();
}
