//! `shortlist serve` over real HTTP: the binary on a free port with a fresh SQLite database, a
//! study created from the form, locked, run (two clicks, one run) against the mock with canned
//! answers; cross-site posts refused with nothing stored; a token required off loopback and for
//! writes; an oversized upload refused with the server still up; untrusted text escaped.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Mock, data, shortlist, stderr};

/// The workbench as a child process; killed when dropped.
pub struct Server {
    child: Child,
    pub addr: String,
}

impl Server {
    pub fn start(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let url = format!("sqlite://{}?mode=rwc", dir.join("web.db").display());
        Server::start_with(&url, dir, extra, env)
    }

    /// The workbench on the database `url`.
    pub fn start_on(url: &str, dir: &Path, extra: &[&str]) -> Server {
        Server::start_with(url, dir, extra, &[])
    }

    fn start_with(url: &str, dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut command = shortlist();
        command
            .env("DATABASE_URL", url)
            .current_dir(dir)
            .args(["serve", "--bind", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        Server {
            child,
            addr: line.trim().trim_start_matches("http://").to_owned(),
        }
    }
}

impl Server {
    /// Send SIGINT (what Ctrl-C sends) and wait up to `secs` for the process to exit.
    pub fn interrupt(&mut self, secs: u64) -> std::process::ExitStatus {
        self.signal(libc::SIGINT, secs)
    }

    /// Send `signal` (SIGINT: Ctrl-C; SIGTERM: a service manager's stop) and wait up to `secs`
    /// for the workbench to exit.
    pub fn signal(&mut self, signal: i32, secs: u64) -> std::process::ExitStatus {
        let pid = i32::try_from(self.child.id()).unwrap();
        // SAFETY: sending a signal to a child process this test spawned and still owns.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the workbench did not exit within {secs} s of signal {signal}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response: status, headers (lower-case names) and body.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// One HTTP/1.1 request over a fresh connection.
pub fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    // A server may answer (413) before reading all of a large body.
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_lowercase(), v.trim().to_owned()))
        .collect::<Vec<_>>();
    let body = if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v == "chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

/// The study status at `path` (`/api/studies/NAME/status[?version=N]`) once its state is
/// `done`, or as it stands after two minutes.
pub fn status_when_done(a: &str, path: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = http(a, "GET", path, &[], b"").json();
        if s["state"] == "done" || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The text of a page's `<textarea id="toml">`, unescaped.
fn textarea(page: &str) -> String {
    let start = page
        .find(r#"<textarea id="toml""#)
        .expect("the form's text box");
    let inner = &page[start..];
    let inner = &inner[inner.find('>').unwrap() + 1..inner.find("</textarea>").unwrap()];
    inner
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&amp;", "&")
}

/// A form body, url-encoded.
pub fn form(fields: &[(&str, &str)]) -> Vec<u8> {
    fields
        .iter()
        .map(|(k, v)| {
            let enc: String = v
                .bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                        (b as char).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect();
            format!("{k}={enc}")
        })
        .collect::<Vec<_>>()
        .join("&")
        .into_bytes()
}

/// The mini study against `endpoint`, its eval set beside it in `dir`, quick load settings.
pub fn study_text(dir: &Path, endpoint: &str) -> String {
    let set_path = data("study/mini.yaml");
    let yaml = std::fs::read_to_string(&set_path).unwrap();
    std::fs::write(dir.join("mini.yaml"), &yaml).unwrap();
    let set = shortlist_evals::EvalSet::from_yaml("mini.yaml", &yaml).unwrap();
    std::fs::read_to_string(data("study/mini.study.toml"))
        .unwrap()
        .replace("@EVALSET@", "mini.yaml")
        .replace("@SHA256@", set.sha256())
        .replace("@SOURCE@", endpoint)
        .replace("rate_rps = 0.5", "rate_rps = 8.0")
        .replace("peak_rps = 0.5", "peak_rps = 8.0")
        .replace("sweep_rps = [1.0, 2.0]", "sweep_rps = [16.0]")
}

const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");

#[test]
fn off_loopback_without_a_token_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = shortlist()
        .env(
            "DATABASE_URL",
            format!("sqlite://{}?mode=rwc", dir.path().join("w.db").display()),
        )
        .args(["serve", "--bind", "0.0.0.0:0"])
        .env_remove("SHORTLIST_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("token"), "{}", stderr(&out));
}

#[test]
fn forms_runs_and_refusals_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mock = Mock::start(&[
        "--answers",
        data("study/mini.answers.jsonl").to_str().unwrap(),
    ]);
    let server = Server::start(d, &["--workers", "1"], &[]);
    let a = server.addr.as_str();
    assert_eq!(http(a, "GET", "/healthz", &[], b"").status, 200);
    let page = http(a, "GET", "/", &[], b"");
    assert_eq!(page.status, 200);
    assert!(
        page.header("content-security-policy")
            .unwrap()
            .starts_with("default-src 'self'")
    );
    let text = study_text(d, &format!("{}#mock", mock.url));

    // A cross-site form post is refused and stores nothing.
    let evil = http(
        a,
        "POST",
        "/studies",
        &[FORM, ("origin", "http://evil.example")],
        &form(&[("toml", &text)]),
    );
    assert_eq!(evil.status, 403);
    let evil = http(
        a,
        "POST",
        "/studies",
        &[FORM, ("sec-fetch-site", "cross-site")],
        &form(&[("toml", &text)]),
    );
    assert_eq!(evil.status, 403);
    assert_eq!(
        http(a, "GET", "/api/studies", &[], b"").json(),
        Value::Array(vec![])
    );

    // A bad study comes back with its line and field; nothing is stored.
    let bad = http(
        a,
        "POST",
        "/studies",
        &[FORM],
        &form(&[("toml", &text.replace("rate_rps = 8.0", "rate_rps = -1"))]),
    );
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("workload.rate_rps"), "{}", bad.body);
    assert_eq!(
        http(a, "GET", "/api/studies", &[], b"").json(),
        Value::Array(vec![])
    );

    // The form: 303 to the study's page.
    let created = http(a, "POST", "/studies", &[FORM], &form(&[("toml", &text)]));
    assert_eq!(created.status, 303, "{}", created.body);
    assert_eq!(created.header("location"), Some("/studies/mini"));
    assert_eq!(http(a, "GET", "/studies/mini", &[], b"").status, 200);
    assert_eq!(http(a, "GET", "/studies/nothing", &[], b"").status, 404);
    let locked = http(a, "POST", "/studies/mini/lock", &[FORM], b"");
    assert_eq!(locked.status, 303);
    // Its endpoint candidate is checked when asked, before any run.
    let checked = http(a, "GET", "/studies/mini?version=1&check=1", &[], b"").body;
    assert!(
        checked.contains(r#"id="endpoint-check-smol" class="notice""#)
            && checked.contains("The endpoint answers now: shortlist mock serve"),
        "{checked}"
    );
    // A locked study cannot be changed through the form: a changed file is a new version.
    let changed = http(
        a,
        "POST",
        "/studies",
        &[FORM],
        &form(&[("toml", &text.replace("six trivial", "six easy"))]),
    );
    assert_eq!(changed.status, 303);
    let v1 = http(a, "GET", "/api/studies", &[], b"").json();
    assert!(
        v1.as_array()
            .unwrap()
            .iter()
            .any(|s| s["version"] == 1 && s["state"] == "locked")
    );

    // Two Run clicks at once queue one run (on version 1, locked).
    let v2 = http(a, "GET", "/api/studies/mini", &[], b"").json();
    assert_eq!(v2["version"], 2);
    let lock2 = http(a, "POST", "/api/studies/mini/lock", &[], b"");
    assert_eq!(lock2.status, 200, "{}", lock2.body);
    let clicks: Vec<_> = (0..2)
        .map(|_| {
            let a = a.to_owned();
            std::thread::spawn(move || http(&a, "POST", "/studies/mini/runs", &[FORM], b"").status)
        })
        .collect();
    for c in clicks {
        assert_eq!(c.join().unwrap(), 303);
    }
    let status = status_when_done(a, "/api/studies/mini/status");
    assert_eq!(status["state"], "done", "{status}");
    let generations = status["generations"].as_array().unwrap();
    assert_eq!(generations.len(), 1, "two clicks, one run: {status}");
    assert_eq!(generations[0]["jobs"].as_array().unwrap().len(), 4);
    let record = http(
        a,
        "GET",
        "/api/studies/mini/candidates/smol/record",
        &[],
        b"",
    )
    .json();
    assert_eq!(record["verdict"], "disqualified");
    let pdf = http(
        a,
        "GET",
        "/studies/mini/candidates/smol/record.pdf",
        &[],
        b"",
    );
    assert_eq!(pdf.header("content-type"), Some("application/pdf"));
    let page = http(a, "GET", "/studies/mini/candidates/smol", &[], b"");
    assert_eq!(page.status, 200);
    // The page's texts are whole: the zero-width break opportunities of the PDF's view stay out
    // of it, so what a reader copies (a rule's metric, a hash) is what the record holds.
    assert!(page.body.contains("high_value_failures"), "{}", page.body);
    assert!(!page.body.contains('\u{200B}'), "{}", page.body);
    let compare = http(
        a,
        "GET",
        "/studies/mini/compare?candidates=smol&mode=all",
        &[],
        b"",
    );
    assert_eq!(compare.status, 200);
    assert!(compare.body.contains("6 of 6 cases"), "{}", compare.body);
    // The TTFT figures name their population in full, as the record does.
    let population = record["performance"]["latencies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["metric"] == "TTFT")
        .and_then(|l| l["population"].as_str())
        .unwrap_or_else(|| panic!("the record's TTFT line: {record}"));
    assert!(
        compare.body.contains(&format!(
            "id=\"ttft-population\" class=\"muted small\">TTFT population (every column): {}<",
            population
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
        )),
        "{population}: {}",
        compare.body
    );
    // Its filters keep the comparison's version.
    assert!(
        compare
            .body
            .contains(r#"<input type="hidden" name="version" value="2""#),
        "{}",
        compare.body
    );
    // A case's link names the comparison's version and generation.
    assert!(
        compare
            .body
            .contains(r#"href="/studies/mini/cases/capital?version=2&amp;generation=1""#),
        "{}",
        compare.body
    );
    // The canned answers carry no logprobs: the near-ties are said to be unmeasured.
    assert!(compare.body.contains("Near-ties"), "{}", compare.body);
    assert!(compare.body.contains("not measured"), "{}", compare.body);
    // The study's attainment target (its traffic section: 90 %), as its records were judged by,
    // with its line on the goodput chart.
    assert!(
        compare
            .body
            .contains("Attainment target of the study: 90 % of requests within the SLO"),
        "{}",
        compare.body
    );
    assert!(
        compare
            .body
            .contains("attainment line: goodput = 90 % of offered"),
        "{}",
        compare.body
    );
    // The criteria read as words, not as the canonical JSON the columns are matched by.
    assert!(
        compare.body.contains(
            "uniform: 8 requests, 800 input / 128 output tokens in all, 8 req/s, seed 7; open loop"
        ),
        "{}",
        compare.body
    );
    assert!(
        !compare.body.contains("&quot;input_tokens&quot;"),
        "{}",
        compare.body
    );
    assert!(
        !compare.body.contains("\"input_tokens\""),
        "{}",
        compare.body
    );
    // The cases' times say they were shared: the endpoint's quality run kept the study's serving
    // concurrency (4) in flight, which every stored case names.
    assert!(
        compare
            .body
            .contains("shared with the cases in flight beside it (smol: up to 4)"),
        "{}",
        compare.body
    );
    // The overlaid charts are on the page, drawn for the one column.
    for chart in [
        "Pass rate per category, 95 % Wilson intervals",
        "TTFT, empirical CDFs overlaid",
        "Goodput vs offered load",
        "Memory fit",
    ] {
        assert!(compare.body.contains(chart), "{chart}");
    }
    // A second run: the comparison (built once, then kept) moves to its records, and one
    // candidate from both runs is two columns on the same cases.
    let first = http(
        a,
        "GET",
        "/api/studies/mini/compare?candidates=smol",
        &[],
        b"",
    )
    .json();
    assert_eq!(first["generation"], 1);
    for case in first["cases"].as_array().unwrap() {
        assert_eq!(case["concurrency"], serde_json::json!([4]), "{case}");
    }
    let again = http(
        a,
        "POST",
        "/api/studies/mini/runs",
        &[],
        br#"{"again": true}"#,
    );
    assert_eq!(again.status, 202, "{}", again.body);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = http(a, "GET", "/api/studies/mini/status", &[], b"").json();
        if s["state"] == "done" && s["generations"].as_array().unwrap().len() == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the second run did not finish: {s}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let second = http(
        a,
        "GET",
        "/api/studies/mini/compare?candidates=smol",
        &[],
        b"",
    )
    .json();
    assert_eq!(second["generation"], 2, "a stale comparison was served");
    let both = http(
        a,
        "GET",
        "/api/studies/mini/compare?candidates=smol@g1,smol@g2",
        &[],
        b"",
    )
    .json();
    assert_eq!(
        both["candidates"],
        serde_json::json!(["smol (g1)", "smol (g2)"])
    );
    assert_eq!(both["pairs"][0]["only_a"], 0, "{both}");
    assert_eq!(both["pairs"][0]["only_b"], 0, "{both}");
    // A finished run accepted as the baseline from the page: marked, and the other run still
    // offers it; only a run with records can be one; the API does the same.
    let page = http(a, "GET", "/studies/mini", &[], b"").body;
    assert_eq!(page.matches("Accept as baseline").count(), 2, "{page}");
    let version =
        http(a, "GET", "/api/studies/mini/status", &[], b"").json()["version"].to_string();
    let accept = |generation: &str| {
        http(
            a,
            "POST",
            "/studies/mini/baseline",
            &[FORM],
            &form(&[("version", &version), ("generation", generation)]),
        )
    };
    let accepted = accept("1");
    assert_eq!(accepted.status, 303, "{}", accepted.body);
    let page = http(a, "GET", "/studies/mini", &[], b"").body;
    assert_eq!(page.matches("Accept as baseline").count(), 1, "{page}");
    assert!(
        page.contains("accepted as the baseline by workbench"),
        "{page}"
    );
    let status = http(a, "GET", "/api/studies/mini/status", &[], b"").json();
    assert_eq!(status["baseline"]["generation"], 1, "{status}");
    let none = accept("9");
    assert_eq!(none.status, 400, "{}", none.body);
    assert!(none.body.contains("has no record"), "{}", none.body);
    let api = http(
        a,
        "POST",
        "/api/studies/mini/baseline",
        &[("content-type", "application/json")],
        br#"{"generation": 2}"#,
    );
    assert_eq!(api.status, 200, "{}", api.body);
    assert_eq!(api.json()["generation"], 2);
    assert_eq!(api.json()["accepted_by"], "api");
    // A long history is read a few generations at a time (a study run nightly has one a day):
    // the newest in full, the others a line each with the whole view's figures, any of them
    // opened in full by number; the API and the page agree.
    let whole = http(a, "GET", "/api/studies/mini/status", &[], b"").json();
    assert!(whole.get("earlier").is_none(), "{whole}");
    let newest = http(a, "GET", "/api/studies/mini/status?generations=1", &[], b"").json();
    assert_eq!(
        newest["generations"],
        serde_json::json!([whole["generations"][0]])
    );
    let line = &newest["earlier"][0];
    assert_eq!(newest["earlier"].as_array().unwrap().len(), 1, "{newest}");
    assert_eq!(line["number"], 1);
    assert_eq!(line["verdicts"], whole["generations"][1]["verdicts"]);
    assert_eq!(
        line["jobs"],
        serde_json::json!({"done": whole["generations"][1]["jobs"].as_array().unwrap().len()})
    );
    let page = http(a, "GET", "/studies/mini?generations=1", &[], b"").body;
    assert!(page.contains(r#"id="generation-2""#), "{page}");
    assert!(!page.contains(r#"id="generation-1""#), "{page}");
    assert!(page.contains(r#"id="earlier""#), "{page}");
    assert!(
        page.contains(&format!(
            r#"href="/studies/mini?version={version}&amp;generation=1#generation-1""#
        )),
        "{page}"
    );
    let page = http(
        a,
        "GET",
        "/studies/mini?generations=1&generation=1",
        &[],
        b"",
    )
    .body;
    assert!(page.contains(r#"id="generation-2""#), "{page}");
    assert!(page.contains(r#"id="generation-1""#), "{page}");
    assert!(!page.contains(r#"id="earlier""#), "{page}");
    // The default page shows both in full (fewer than its five).
    let page = http(a, "GET", "/studies/mini", &[], b"").body;
    assert!(page.contains(r#"id="generation-1""#) && !page.contains(r#"id="earlier""#));
    // A study whose name needs encoding in a URL (a space, `&`, `/`, `#`, non-ASCII): its page's
    // links and forms still reach it.
    let odd = "q&a team/β #1";
    let odd_text = text.replacen("name = \"mini\"", &format!("name = \"{odd}\""), 1);
    let created = http(
        a,
        "POST",
        "/studies",
        &[FORM],
        &form(&[("toml", &odd_text)]),
    );
    assert_eq!(created.status, 303, "{}", created.body);
    let odd_path = "/studies/q%26a%20team%2F%CE%B2%20%231";
    assert_eq!(created.header("location"), Some(odd_path));
    let page = http(a, "GET", odd_path, &[], b"").body;
    assert!(
        page.contains(&format!(r#"action="{odd_path}/lock""#)),
        "{page}"
    );
    let locked = http(a, "POST", &format!("{odd_path}/lock"), &[FORM], b"");
    assert_eq!(locked.status, 303, "{}", locked.body);
    let page = http(a, "GET", odd_path, &[], b"").body;
    let state = page.split("id=\"study-state\"").nth(1).unwrap_or_default();
    assert!(
        state.starts_with(" class=\"badge info\">locked<"),
        "{state}"
    );
    // Its candidate has no record yet: its name is not a link, and one candidate has nothing
    // to be compared with.
    assert!(
        !page.contains(&format!("{odd_path}/candidates/")) && !page.contains("/compare?"),
        "{page}"
    );
    for link in [
        format!(r#"action="{odd_path}/runs""#),
        r#"href="/studies/new?from=q%26a%20team%2F%CE%B2%20%231&amp;version=1""#.to_owned(),
        r#"href="/schedules?study=q%26a%20team%2F%CE%B2%20%231#add""#.to_owned(),
    ] {
        assert!(page.contains(&link), "{link}: {page}");
    }
    // One candidate from two runs is a column each; v1 has criteria like v2's but no record.
    let same_criteria = http(
        a,
        "GET",
        "/api/studies/mini/compare?candidates=smol,smol@v1",
        &[],
        b"",
    );
    assert_eq!(same_criteria.status, 400, "{}", same_criteria.body);
    assert!(
        same_criteria.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no generation has a record"),
        "{}",
        same_criteria.body
    );
    // A version with another SLO is refused, saying what differs (before any record is read).
    let other_slo = text
        .replace("six trivial", "six quick")
        .replace("ttft_ms = 2000", "ttft_ms = 1500");
    assert_eq!(
        http(
            a,
            "POST",
            "/studies",
            &[FORM],
            &form(&[("toml", &other_slo)])
        )
        .status,
        303
    );
    assert_eq!(
        http(a, "POST", "/api/studies/mini/lock", &[], b"").status,
        200
    );
    let refused = http(
        a,
        "GET",
        "/studies/mini/compare?candidates=smol@v2,smol@v3",
        &[],
        b"",
    );
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(
        refused.body.contains("the SLO differs: v2 has"),
        "{}",
        refused.body
    );
    assert!(
        !refused.body.contains("the eval set differs"),
        "{}",
        refused.body
    );
    // …and links what changed between the two versions.
    assert!(
        refused.body.contains(
            r#"<a href="/studies/mini/diff?from=2&amp;to=3">What changed between v2 and v3</a>"#
        ),
        "{}",
        refused.body
    );
    let refused = http(
        a,
        "GET",
        "/api/studies/mini/compare?candidates=smol@v2,smol@v3",
        &[],
        b"",
    );
    assert_eq!(refused.status, 422);
    assert_eq!(refused.json()["error"]["class"], "bad_input");

    // Every version keeps its page and every generation its records (v3 is now the latest):
    // v2's page says a newer version replaces it and links both others; each of its
    // generations links its own records, whose PDF and JSON are that generation's.
    let v2_page = http(a, "GET", "/studies/mini?version=2", &[], b"").body;
    assert!(v2_page.contains("<h1>mini v2"), "{v2_page}");
    assert!(v2_page.contains(r#"id="newer-version""#), "{v2_page}");
    assert!(v2_page.contains("v3 (locked)"), "{v2_page}");
    for link in [
        r#"href="/studies/mini?version=1""#.to_owned(),
        r#"href="/studies/mini?version=3""#.to_owned(),
        r#"href="/studies/mini/candidates/smol?version=2&amp;generation=1""#.to_owned(),
        r#"href="/studies/mini/candidates/smol?version=2&amp;generation=2""#.to_owned(),
        r#"href="/studies/mini/candidates/smol?version=2""#.to_owned(),
        r#"href="/studies/new?from=mini&amp;version=2""#.to_owned(),
    ] {
        assert!(v2_page.contains(&link), "{link}: {v2_page}");
    }
    let latest_page = http(a, "GET", "/studies/mini", &[], b"").body;
    assert!(latest_page.contains("<h1>mini v3"), "{latest_page}");
    assert!(!latest_page.contains("newer-version"), "{latest_page}");
    let g1 = http(
        a,
        "GET",
        "/studies/mini/candidates/smol?version=2&generation=1",
        &[],
        b"",
    );
    assert_eq!(g1.status, 200, "{}", g1.body);
    assert!(g1.body.contains("study v2 · generation 1"), "{}", g1.body);
    // A second version's record links the criteria it changed; a first version's has nothing
    // to link.
    assert!(
        g1.body.contains(
            r#"<a href="/studies/mini/diff?from=1&amp;to=2" id="criteria-changes">Criteria changed since v1</a>"#
        ),
        "{}",
        g1.body
    );
    assert!(
        g1.body.contains(
            r#"href="/studies/mini/candidates/smol/record.pdf?version=2&amp;generation=1""#
        ),
        "{}",
        g1.body
    );
    let json = http(
        a,
        "GET",
        "/studies/mini/candidates/smol/record.json?version=2&generation=1",
        &[],
        b"",
    )
    .json();
    assert_eq!(json["generation"], 1, "{json}");
    assert_eq!(json["study"]["version"], 2, "{json}");
    let newest = http(
        a,
        "GET",
        "/api/studies/mini/candidates/smol/record?version=2",
        &[],
        b"",
    )
    .json();
    assert_eq!(newest["generation"], 2, "{newest}");
    let pdf = http(
        a,
        "GET",
        "/studies/mini/candidates/smol/record.pdf?version=2&generation=1",
        &[],
        b"",
    );
    assert_eq!(pdf.header("content-type"), Some("application/pdf"));
    assert_eq!(
        pdf.header("content-disposition"),
        Some(r#"inline; filename="mini-smol-v2-g1.pdf""#)
    );
    // v3 has no record yet: its candidate's record is not found, v2's still is.
    assert_eq!(
        http(a, "GET", "/studies/mini/candidates/smol", &[], b"").status,
        404
    );
    // v1 run from its own page: the form names v1, the run is v1's, v3 stays unrun.
    let v1_page = http(a, "GET", "/studies/mini?version=1", &[], b"").body;
    assert!(v1_page.contains(r#"name="version" value="1""#), "{v1_page}");
    let run = http(
        a,
        "POST",
        "/studies/mini/runs",
        &[FORM],
        &form(&[("version", "1")]),
    );
    assert_eq!(run.status, 303, "{}", run.body);
    assert_eq!(
        run.header("location"),
        Some("/studies/mini?version=1#progress")
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = http(a, "GET", "/api/studies/mini/status?version=1", &[], b"").json();
        if s["state"] == "done" {
            assert_eq!(s["version"], 1, "{s}");
            assert_eq!(
                s["generations"][0]["verdicts"]["smol"], "disqualified",
                "{s}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "v1's run did not finish: {s}");
        std::thread::sleep(Duration::from_millis(300));
    }
    let v3 = http(a, "GET", "/api/studies/mini/status", &[], b"").json();
    assert_eq!(v3["version"], 3, "{v3}");
    assert_eq!(v3["generations"], serde_json::json!([]), "{v3}");
    // The studies list shows the study once: its latest version (v3, not run) with its three
    // versions, and the records that stand meanwhile — the newest version that ran, v2.
    let home = http(a, "GET", "/", &[], b"").body;
    assert_eq!(
        home.matches(r#"href="/studies/mini?version=3""#).count(),
        1,
        "{home}"
    );
    assert!(home.contains("3 versions"), "{home}");
    assert!(
        home.contains(r#"<a href="/studies/mini?version=2">v2 (done)</a>: smol disqualified"#),
        "{home}"
    );
    // v1 is no row of its own (its run is among the recent runs).
    assert!(!home.contains(r#">mini v1</a>"#), "{home}");

    // Edit criteria: the form holds v3's text as stored; saved unchanged, nothing is stored;
    // changed, it is v4, a draft; a refused save comes back as the same edit page.
    let edit = http(a, "GET", "/studies/new?from=mini&version=3", &[], b"");
    assert_eq!(edit.status, 200, "{}", edit.body);
    assert!(edit.body.contains("Edit mini v3"), "{}", edit.body);
    assert!(
        edit.body.contains("Saving a changed copy stores mini v4"),
        "{}",
        edit.body
    );
    let stored_text = textarea(&edit.body);
    assert!(stored_text.contains("ttft_ms = 1500"), "{stored_text}");
    let same = http(
        a,
        "POST",
        "/studies",
        &[FORM],
        &form(&[("toml", &stored_text)]),
    );
    assert_eq!(same.status, 303, "{}", same.body);
    assert_eq!(
        http(a, "GET", "/api/studies/mini", &[], b"").json()["version"],
        3
    );
    let bad = http(
        a,
        "POST",
        "/studies",
        &[FORM],
        &form(&[
            (
                "toml",
                &stored_text.replace("ttft_ms = 1500", "ttft_ms = \"soon\""),
            ),
            ("from", "mini"),
            ("from_version", "3"),
        ]),
    );
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("Edit mini v3"), "{}", bad.body);
    assert!(bad.body.contains("slo"), "{}", bad.body);
    let changed = http(
        a,
        "POST",
        "/studies",
        &[FORM],
        &form(&[(
            "toml",
            &stored_text.replace("ttft_ms = 1500", "ttft_ms = 1200"),
        )]),
    );
    assert_eq!(changed.status, 303, "{}", changed.body);
    let v4 = http(a, "GET", "/api/studies/mini", &[], b"").json();
    assert_eq!(v4["version"], 4, "{v4}");
    assert_eq!(v4["state"], "draft", "{v4}");
    assert_eq!(v4["study"]["slo"]["ttft_ms"], 1200, "{v4}");
    let v3 = http(a, "GET", "/api/studies/mini?version=3", &[], b"").json();
    assert_eq!(v4["study"]["question"], v3["study"]["question"], "{v4}");
    assert_eq!(v4["study"]["previous"], v3["lock_sha256"], "{v4}");
    // Editing the draft says saving replaces it.
    let edit4 = http(a, "GET", "/studies/new?from=mini", &[], b"").body;
    assert!(edit4.contains("Saving replaces this draft"), "{edit4}");
    // The empty form offers each study's latest version as a text to start from.
    let blank = http(a, "GET", "/studies/new?as=file", &[], b"").body;
    assert!(
        blank.contains(r#"href="/studies/new?from=mini&amp;version=4""#),
        "{blank}"
    );
    assert!(!blank.contains("from=mini&amp;version=3"), "{blank}");

    // An upload over the limit: 413, and the server is still up.
    let big = vec![b'a'; 17 << 20];
    let refused = http(
        a,
        "POST",
        "/api/studies",
        &[("content-type", "text/plain")],
        &big,
    );
    assert_eq!(refused.status, 413);
    assert_eq!(http(a, "GET", "/healthz", &[], b"").status, 200);
    let metrics = http(a, "GET", "/metrics", &[], b"").body;
    assert!(
        metrics.contains("shortlist_jobs{state=\"done\"} 12"),
        "{metrics}"
    );
    assert!(
        metrics.contains("shortlist_http_request_seconds_bucket"),
        "{metrics}"
    );
}

#[test]
fn a_token_guards_writes_and_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let token = "a-long-enough-test-token";
    let server = Server::start(
        dir.path(),
        &["--workers", "0"],
        &[("SHORTLIST_TOKEN", token)],
    );
    let a = server.addr.as_str();
    assert_eq!(
        http(a, "GET", "/", &[], b"").status,
        200,
        "pages read without it"
    );
    assert_eq!(http(a, "GET", "/api/studies", &[], b"").status, 401);
    let text = study_text(dir.path(), "http://127.0.0.1:9#m");
    assert_eq!(
        http(a, "POST", "/studies", &[FORM], &form(&[("toml", &text)])).status,
        401
    );
    let bearer = format!("Bearer {token}");
    assert_eq!(
        http(a, "GET", "/api/studies", &[("authorization", &bearer)], b"").status,
        200
    );
    let login = http(a, "POST", "/login", &[FORM], &form(&[("token", token)]));
    assert_eq!(login.status, 303);
    let cookie = login.header("set-cookie").unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap();
    let created = http(
        a,
        "POST",
        "/studies",
        &[FORM, ("cookie", pair)],
        &form(&[("toml", &text)]),
    );
    assert_eq!(created.status, 303, "{}", created.body);
}

/// Text from studies, eval sets and outputs is untrusted: it reaches the page escaped.
#[test]
fn untrusted_text_is_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--workers", "0"], &[]);
    let a = server.addr.as_str();
    let payload = "<script>alert(1)</script>\"><img src=x onerror=alert(2)>";
    let text = study_text(dir.path(), "http://127.0.0.1:9#m").replace(
        "Can the smallest model answer six trivial questions?",
        &payload.replace('"', "\\\""),
    );
    let created = http(a, "POST", "/studies", &[FORM], &form(&[("toml", &text)]));
    assert_eq!(created.status, 303, "{}", created.body);
    for path in ["/", "/studies/mini"] {
        let page = http(a, "GET", path, &[], b"").body;
        assert!(!page.contains("<script>alert"), "{path}: {page}");
        assert!(!page.contains("<img src=x"), "{path}");
        assert!(
            page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{path}: {page}"
        );
        // The only script is ours.
        assert_eq!(page.matches("<script").count(), 1, "{path}");
    }
}

/// A malformed query string or form is refused as bad input in the workbench's own shape — the
/// API's JSON error, a page's error page — naming the field, never as axum's plain text.
#[test]
fn malformed_queries_and_forms_are_refused_in_the_workbenchs_shape() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--workers", "0"], &[]);
    let a = server.addr.as_str();
    let text = study_text(dir.path(), "http://127.0.0.1:9#m");
    let created = http(a, "POST", "/studies", &[FORM], &form(&[("toml", &text)]));
    assert_eq!(created.status, 303, "{}", created.body);
    for (method, path, field) in [
        ("GET", "/api/studies/mini/status?version=abc", "version"),
        (
            "GET",
            "/api/studies/mini/status?generations=-1",
            "generations",
        ),
        ("GET", "/api/studies/mini?version=1.5", "version"),
        (
            "DELETE",
            "/api/schedules/nightly/webhooks",
            "missing field `url`",
        ),
    ] {
        let reply = http(a, method, path, &[], b"");
        assert_eq!(reply.status, 400, "{path}: {}", reply.body);
        let error = &reply.json()["error"];
        assert_eq!(
            (error["status"].as_u64(), error["class"].as_str()),
            (Some(400), Some("bad_input")),
            "{path}: {error}"
        );
        let message = error["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("the query string could not be read: {field}")),
            "{path}: {message}"
        );
    }
    for (method, path, body) in [
        ("GET", "/studies/mini?generations=-1", Vec::new()),
        ("GET", "/studies/mini?version=abc", Vec::new()),
        ("POST", "/studies/mini/lock", form(&[("version", "abc")])),
        ("GET", "/schedules/nightly?nights=abc", Vec::new()),
        (
            "POST",
            "/schedules/nightly/webhooks",
            form(&[("secret", "x")]),
        ),
    ] {
        let reply = http(a, method, path, &[FORM], &body);
        assert_eq!(reply.status, 400, "{path}: {}", reply.body);
        assert!(
            reply
                .header("content-type")
                .is_some_and(|t| t.starts_with("text/html")),
            "{path}"
        );
        assert!(reply.body.contains("Bad input"), "{path}: {}", reply.body);
        assert!(
            [
                "generations",
                "version",
                "nights",
                "missing field <code>url</code>"
            ]
            .iter()
            .any(|field| reply.body.contains(&format!("could not be read: {field}"))),
            "{path}: {}",
            reply.body
        );
    }
    // Nothing was locked by the refused form.
    let study = http(a, "GET", "/api/studies/mini", &[], b"").json();
    assert_eq!(study["state"], "draft", "{study}");
}

/// A multipart/form-data body with these text fields (a field named `file` is sent as a file).
pub(crate) fn multipart(fields: &[(&str, &str)]) -> (String, Vec<u8>) {
    let boundary = "----shortlist-test-boundary-7d1f";
    let mut body = Vec::new();
    for (name, value) in fields {
        let disposition = if *name == "file" {
            format!("form-data; name=\"{name}\"; filename=\"upload.yaml\"")
        } else {
            format!("form-data; name=\"{name}\"")
        };
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n").as_bytes(),
        );
        body.extend_from_slice(value.as_bytes());
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// An eval set of `counts` cases per category: ids `CATEGORY-N`, inputs naming their number.
fn eval_set_yaml(name: &str, counts: &[(&str, usize)]) -> String {
    let mut yaml = format!("format: shortlist.evalset.v1\nname: {name}\ncases:\n");
    for (category, n) in counts {
        for i in 0..*n {
            yaml.push_str(&format!(
                "  - id: {category}-{i}\n    category: {category}\n    input: Question number {i} of {category}?\n    checks: [{{type: contains, value: \"{i}\"}}]\n"
            ));
        }
    }
    yaml
}

#[test]
fn a_large_eval_set_is_shown_a_few_cases_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = Server::start(d, &["--workers", "0", "--schedule-every", "0"], &[]);
    let a = server.addr.as_str();
    let db = format!("sqlite://{}?mode=rwc", d.join("web.db").display());
    let store = |yaml: &str| {
        std::fs::write(d.join("set.yaml"), yaml).unwrap();
        let out = shortlist()
            .env("DATABASE_URL", &db)
            .args(["eval", "store", "set.yaml"])
            .current_dir(d)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    };
    let items = |path: &str| {
        let page = http(a, "GET", path, &[], b"");
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        let ids: Vec<String> = page
            .body
            .split("class=\"case-item\"")
            .skip(1)
            .filter_map(|item| {
                let id = item.split("<span class=\"mono\">").nth(1)?;
                Some(id.split('<').next()?.to_owned())
            })
            .collect();
        (ids, page.body)
    };
    // A small set is shown whole, as before.
    store(&eval_set_yaml("small", &[("ordinary", 30), ("refusal", 3)]));
    let (ids, _) = items("/evalsets/small");
    assert_eq!(ids.len(), 33);
    // A large one: twenty cases of each category, and each category's list a link away.
    store(&eval_set_yaml(
        "large",
        &[("ordinary", 250), ("refusal", 30), ("high-value", 5)],
    ));
    let (ids, body) = items("/evalsets/large");
    assert_eq!(ids.len(), 20 + 20 + 5, "{ids:?}");
    assert_eq!(ids[0], "ordinary-0");
    assert!(body.contains("href=\"/evalsets/large?version=1&amp;category=ordinary#cases\""));
    assert!(body.contains("href=\"/evalsets/large?version=1&amp;category=refusal#cases\""));
    assert!(
        !body.contains("category=high-value#cases"),
        "five cases are all shown"
    );
    // One category, a hundred cases a page; a page past the last shows the last.
    let (ids, body) = items("/evalsets/large?version=1&category=ordinary");
    assert_eq!(ids.len(), 100);
    assert!(body.contains("page=2#cases"), "a link to the next page");
    let (ids, _) = items("/evalsets/large?category=ordinary&page=3");
    assert_eq!(ids.len(), 50);
    assert_eq!(
        (ids[0].as_str(), ids[49].as_str()),
        ("ordinary-200", "ordinary-249")
    );
    let (last, _) = items("/evalsets/large?category=ordinary&page=99");
    assert_eq!(last, ids);
    // Found by id or text, in one category or any, ignoring case.
    let (ids, _) = items("/evalsets/large?q=NUMBER%204%20OF");
    assert_eq!(ids, ["ordinary-4", "refusal-4", "high-value-4"]);
    let (ids, _) = items("/evalsets/large?q=-2&category=refusal");
    let expected: Vec<String> = [2, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29]
        .iter()
        .map(|i| format!("refusal-{i}"))
        .collect();
    assert_eq!(ids, expected);
    let (ids, _) = items("/evalsets/large?q=nowhere");
    assert!(ids.is_empty());
    // A page number that is not one is refused as bad input.
    assert_eq!(
        http(a, "GET", "/evalsets/large?page=x", &[], b"").status,
        400
    );
    // The API still gives every case.
    let set = http(a, "GET", "/api/evalsets/large", &[], b"").json();
    assert_eq!(set["cases"].as_array().unwrap().len(), 285);
}

#[test]
fn a_comparison_of_many_cases_is_shown_a_page_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Two endpoints that disagree on every case: one answers "Paris", the other not.
    std::fs::write(
        d.join("paris.jsonl"),
        "{\"match\": \"capital\", \"content\": \"Paris.\"}\n",
    )
    .unwrap();
    let paris = Mock::start(&["--answers", d.join("paris.jsonl").to_str().unwrap()]);
    let other = Mock::start(&[]);
    let mut yaml = "format: shortlist.evalset.v1\nname: many\ncases:\n".to_owned();
    for i in 0..450 {
        yaml.push_str(&format!(
            "  - id: capital-{i:03}\n    category: ordinary\n    input: What is the capital of France? (ticket {i})\n    checks: [{{type: contains, value: Paris}}]\n"
        ));
    }
    std::fs::write(d.join("many.yaml"), &yaml).unwrap();
    let set = shortlist_evals::EvalSet::from_yaml("many.yaml", &yaml).unwrap();
    let study = std::fs::read_to_string(data("study/mini.study.toml"))
        .unwrap()
        .replace("name = \"mini\"", "name = \"many\"")
        .replace("@EVALSET@", "many.yaml")
        .replace("@SHA256@", set.sha256())
        .replace("@SOURCE@", &format!("{}#mock", paris.url))
        .replace("rate_rps = 0.5", "rate_rps = 8.0")
        .replace("peak_rps = 0.5", "peak_rps = 8.0")
        .replace("sweep_rps = [1.0, 2.0]", "sweep_rps = [16.0]")
        .replacen(
            "[[disqualifier]]",
            &format!(
                "[[candidate]]\nname = \"other\"\nsource = \"{}#mock\"\nprice_per_device_hour = 0.05\n\n[[disqualifier]]",
                other.url
            ),
            1,
        );
    std::fs::write(d.join("many.study.toml"), study).unwrap();
    let db = format!("sqlite://{}?mode=rwc", d.join("web.db").display());
    for args in [
        &["study", "create", "many.study.toml"][..],
        &["study", "lock", "many"],
        &["study", "run", "many", "--stale-after", "0"],
    ] {
        let out = shortlist()
            .env("DATABASE_URL", &db)
            .args(args)
            .current_dir(d)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    }
    let server = Server::start(d, &["--workers", "0", "--schedule-every", "0"], &[]);
    let a = server.addr.as_str();
    let rows = |query: &str| {
        let path = format!("/studies/many/compare?version=1&candidates=smol,other{query}");
        let page = http(a, "GET", &path, &[], b"");
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        let ids: Vec<String> = page
            .body
            .split("<a href=\"/studies/many/cases/")
            .skip(1)
            .filter_map(|row| Some(row.split('?').next()?.to_owned()))
            .collect();
        (ids, page.body)
    };
    // 450 disagreements, 200 a page; a page past the last shows the last.
    let (first, body) = rows("");
    assert_eq!(first.len(), 200);
    assert_eq!(
        (first[0].as_str(), first[199].as_str()),
        ("capital-000", "capital-199")
    );
    assert!(
        body.contains("mode=&amp;category=&amp;q=&amp;page=2#case-count"),
        "a link to page 2"
    );
    let (third, body) = rows("&page=3");
    assert_eq!(third.len(), 50);
    assert_eq!(third[0], "capital-400");
    assert!(body.contains("page=2#case-count") && !body.contains("page=4#case-count"));
    assert_eq!(rows("&page=9").0, third);
    // The filters choose the rows before the pages do.
    let (found, _) = rows("&mode=all&q=capital-3");
    assert_eq!(found.len(), 100, "capital-300 to capital-399");
    assert_eq!(rows("&mode=failures&page=2").0.len(), 200);
    assert_eq!(
        http(a, "GET", "/studies/many/compare?page=-1", &[], b"").status,
        400
    );
}

#[test]
fn eval_sets_and_candidates_are_kept_and_shown() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = Server::start(d, &["--workers", "0", "--schedule-every", "0"], &[]);
    let a = server.addr.as_str();
    let promptfoo = std::fs::read_to_string(data("eval/promptfoo.yaml")).unwrap();

    // Upload from the form: a preview stores nothing and lists what was not mapped.
    let (kind, body) = multipart(&[
        ("format", "promptfoo"),
        ("name", "pf"),
        ("file", &promptfoo),
        ("text", ""),
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
    // The fixture's llm-rubric and latency assertions have no scorer here.
    assert!(
        preview.body.contains("Unmapped: 2 items"),
        "{}",
        preview.body
    );
    assert_eq!(
        http(a, "GET", "/api/evalsets", &[], b"").json(),
        Value::Array(vec![])
    );
    // A cross-site upload is refused.
    let evil = http(
        a,
        "POST",
        "/evalsets/import",
        &[("content-type", &kind), ("origin", "http://evil.example")],
        &body,
    );
    assert_eq!(evil.status, 403);
    // Store: the set is there with its hash and cases; the same again is not a new version.
    let (kind, body) = multipart(&[
        ("format", "promptfoo"),
        ("name", "pf"),
        ("text", &promptfoo),
        ("action", "store"),
    ]);
    let stored = http(
        a,
        "POST",
        "/evalsets/import",
        &[("content-type", &kind)],
        &body,
    );
    assert_eq!(stored.status, 200, "{}", stored.body);
    assert!(stored.body.contains("Stored as pf v1."), "{}", stored.body);
    let api = http(
        a,
        "POST",
        "/api/evalsets/import?format=promptfoo&name=pf&store=true",
        &[("content-type", "text/plain")],
        promptfoo.as_bytes(),
    )
    .json();
    assert_eq!(api["stored"], serde_json::json!([1, false]), "{api}");
    let sets = http(a, "GET", "/api/evalsets", &[], b"").json();
    assert_eq!(sets[0]["name"], "pf");
    assert_eq!(sets[0]["versions"][0]["sha256"], api["sha256"]);
    let cases = api["cases"].as_u64().unwrap();
    assert!(cases > 0);
    let page = http(a, "GET", "/evalsets/pf", &[], b"");
    assert_eq!(page.status, 200);
    let set = http(a, "GET", "/api/evalsets/pf", &[], b"").json();
    assert_eq!(set["cases"].as_array().unwrap().len() as u64, cases);
    let first = set["cases"][0]["id"].as_str().unwrap();
    assert!(page.body.contains(first), "{}", page.body);
    assert_eq!(http(a, "GET", "/evalsets/nothing", &[], b"").status, 404);
    // A bad format or an empty upload comes back with the error; nothing more is stored.
    let (kind, body) = multipart(&[
        ("format", "excel"),
        ("name", "x"),
        ("text", "a"),
        ("action", "store"),
    ]);
    let bad = http(
        a,
        "POST",
        "/evalsets/import",
        &[("content-type", &kind)],
        &body,
    );
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("is not one of"), "{}", bad.body);
    assert_eq!(
        http(a, "GET", "/api/evalsets", &[], b"")
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // A study pasted without its eval set file finds the stored one by its hash.
    let mini_yaml = std::fs::read_to_string(data("study/mini.yaml")).unwrap();
    let (kind, body) = multipart(&[
        ("format", "shortlist"),
        ("name", ""),
        ("text", &mini_yaml),
        ("action", "store"),
    ]);
    assert_eq!(
        http(
            a,
            "POST",
            "/evalsets/import",
            &[("content-type", &kind)],
            &body
        )
        .status,
        200
    );
    let text = study_text(d, "http://127.0.0.1:9#mock");
    std::fs::remove_file(d.join("mini.yaml")).unwrap();
    let created = http(a, "POST", "/studies", &[FORM], &form(&[("toml", &text)]));
    assert_eq!(created.status, 303, "{}", created.body);

    // A study uploaded with its eval set: the set is checked against the pin and stored with
    // the study — and not at all when the study is refused.
    let up_yaml = mini_yaml.replace("name: study-mini", "name: study-uploaded");
    let up_sha = shortlist_evals::EvalSet::from_yaml("up.yaml", &up_yaml)
        .unwrap()
        .sha256()
        .to_owned();
    let up_study = text
        .replace("name = \"mini\"", "name = \"uploaded\"")
        .replace("mini.yaml", "not-on-the-server.yaml")
        .replace(
            shortlist_evals::EvalSet::from_yaml("m.yaml", &mini_yaml)
                .unwrap()
                .sha256(),
            &up_sha,
        );
    let (kind, body) = multipart(&[
        ("file", &up_study.replace("rate_rps = 8.0", "rate_rps = -1")),
        ("toml", ""),
        ("evalset", &up_yaml),
    ]);
    let refused = http(a, "POST", "/studies", &[("content-type", &kind)], &body);
    assert_eq!(refused.status, 400, "{}", refused.body);
    let names = |v: Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(
        !names(http(a, "GET", "/api/evalsets", &[], b"").json())
            .contains(&"study-uploaded".to_owned())
    );
    let (kind, body) = multipart(&[("file", &up_study), ("toml", ""), ("evalset", &up_yaml)]);
    let uploaded = http(a, "POST", "/studies", &[("content-type", &kind)], &body);
    assert_eq!(uploaded.status, 303, "{}", uploaded.body);
    assert_eq!(uploaded.header("location"), Some("/studies/uploaded"));
    assert!(
        names(http(a, "GET", "/api/evalsets", &[], b"").json())
            .contains(&"study-uploaded".to_owned())
    );

    // Candidates: the study's, and one registered from the form.
    let list = http(a, "GET", "/api/candidates", &[], b"").json();
    assert_eq!(list[0]["name"], "smol");
    assert_eq!(list[0]["used_by"][0]["study"], "mini");
    let registered = http(
        a,
        "POST",
        "/candidates",
        &[FORM],
        &form(&[
            ("name", "remote"),
            ("source", "http://127.0.0.1:9/v1#served-model"),
            ("price", "1.5"),
        ]),
    );
    assert_eq!(registered.status, 303, "{}", registered.body);
    assert_eq!(
        registered.header("location"),
        Some("/candidates/remote?check=1")
    );
    let page = http(a, "GET", "/candidates/remote", &[], b"");
    assert_eq!(page.status, 200);
    assert!(page.body.contains("served-model"), "{}", page.body);
    let detail = http(a, "GET", "/api/candidates/remote", &[], b"").json();
    assert_eq!(
        detail["versions"][0]["config"]["price_per_device_hour"],
        1.5
    );
    // A GGUF path that is not there is refused with the reason; nothing is stored.
    let missing = http(
        a,
        "POST",
        "/candidates",
        &[FORM],
        &form(&[
            ("name", "ghost"),
            ("source", "gguf:/nonexistent/model.gguf"),
        ]),
    );
    assert_eq!(missing.status, 400);
    assert!(missing.body.contains("no such file"), "{}", missing.body);
    assert_eq!(http(a, "GET", "/candidates/ghost", &[], b"").status, 404);
    let bad_name = http(
        a,
        "POST",
        "/api/candidates",
        &[("content-type", "application/json")],
        br#"{"name": "a b", "source": "http://x#m"}"#,
    );
    assert_eq!(bad_name.status, 400);
    assert_eq!(http(a, "GET", "/candidates", &[], b"").status, 200);
    let home = http(a, "GET", "/", &[], b"").body;
    assert!(home.contains("/evalsets/pf"), "{home}");

    // Schedules: added from the command line on the same database, shown and paused here.
    assert_eq!(
        http(a, "POST", "/api/studies/mini/lock", &[], b"").status,
        200
    );
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
        "--from",
        "2026-11-01T00:00:00Z",
    ]);
    cli(&["schedule", "tick", "--at", "2026-11-02T03:00:00Z"]);
    let page = http(a, "GET", "/schedules/nightly", &[], b"");
    assert_eq!(page.status, 200);
    // The tick's due instant, to the minute in UTC as the page shows instants.
    assert!(page.body.contains("2026-11-02 03:00"), "{}", page.body);
    assert!(
        http(a, "GET", "/schedules", &[], b"")
            .body
            .contains("/schedules/nightly")
    );
    let evil = http(
        a,
        "POST",
        "/schedules/nightly/pause",
        &[FORM, ("origin", "http://evil.example")],
        b"",
    );
    assert_eq!(evil.status, 403);
    assert_eq!(
        http(a, "GET", "/api/schedules/nightly", &[], b"").json()["schedule"]["enabled"],
        true
    );
    let paused = http(a, "POST", "/schedules/nightly/pause", &[FORM], b"");
    assert_eq!(paused.status, 303);
    let shown = http(a, "GET", "/api/schedules/nightly", &[], b"").json();
    assert_eq!(shown["schedule"]["enabled"], false);
    assert_eq!(shown["history"][0]["state"], "started");
    assert_eq!(http(a, "GET", "/schedules/nothing", &[], b"").status, 404);

    // Schedules added and removed here: the study page links to the form with its study chosen.
    let study_page = http(a, "GET", "/studies/mini", &[], b"").body;
    assert!(
        study_page.contains("/schedules?study=mini#add"),
        "{study_page}"
    );
    let form_page = http(a, "GET", "/schedules?study=mini", &[], b"").body;
    assert!(
        form_page.contains(r#"<option value="mini" selected"#),
        "{form_page}"
    );
    let add = |fields: &[(&str, &str)], headers: &[(&str, &str)]| {
        let mut all = vec![FORM];
        all.extend_from_slice(headers);
        http(a, "POST", "/schedules", &all, &form(fields))
    };
    let weekdays = [
        ("name", "weekdays"),
        ("study", "mini"),
        ("cron", "0 3 * * 1-5"),
        ("tz", "Europe/Berlin"),
        ("what", "quality"),
        ("candidates", " smol "),
    ];
    // Each refusal names its field and why; the form comes back with what was sent; nothing
    // is stored.
    for (field, value, status, says) in [
        ("cron", "0 25 * * 1-5", 400, "hour field <code>25</code>"),
        ("tz", "Nowhere/City", 400, "Nowhere/City"),
        (
            "candidates",
            "ghost",
            400,
            "no candidate <code>ghost</code>",
        ),
        ("what", "everything", 400, "expected all, quality or load"),
        ("study", "nothing", 404, "nothing"),
        (
            "name",
            "nightly",
            400,
            "a schedule named <code>nightly</code> exists",
        ),
    ] {
        let fields: Vec<(&str, &str)> = weekdays
            .iter()
            .map(|(k, v)| (*k, if *k == field { value } else { *v }))
            .collect();
        let refused = add(&fields, &[]);
        assert_eq!(refused.status, status, "{field}: {}", refused.body);
        assert!(refused.body.contains(says), "{field}: {}", refused.body);
        // (A choice from a list comes back as the list; a typed value as typed.)
        assert!(
            ["study", "what"].contains(&field)
                || refused.body.contains(&format!(r#"value="{value}""#)),
            "{field}: the value sent comes back: {}",
            refused.body
        );
    }
    let evil = add(&weekdays, &[("origin", "http://evil.example")]);
    assert_eq!(evil.status, 403);
    let listed = |a: &str| -> Vec<String> {
        http(a, "GET", "/api/schedules", &[], b"")
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(listed(a), ["nightly"]);
    let added = add(&weekdays, &[]);
    assert_eq!(added.status, 303, "{}", added.body);
    assert_eq!(added.header("location"), Some("/schedules/weekdays"));
    let shown = http(a, "GET", "/api/schedules/weekdays", &[], b"").json()["schedule"].clone();
    assert_eq!(shown["cron"], "0 3 * * 1-5");
    assert_eq!(shown["tz"], "Europe/Berlin");
    assert_eq!(shown["what"], "quality");
    assert_eq!(shown["candidates"], serde_json::json!(["smol"]));
    assert_eq!(shown["enabled"], true);
    assert!(shown["next_due"].is_string(), "{shown}");
    // The API: the same checks, errors in its JSON shape.
    let json = [("content-type", "application/json")];
    let api_add = |body: &str| http(a, "POST", "/api/schedules", &json, body.as_bytes());
    // A body that is not the expected JSON is refused in the same shape, saying what it lacks.
    let shapeless = api_add(r#"{"name": "api", "study": "mini"}"#);
    assert_eq!(shapeless.status, 400, "{}", shapeless.body);
    assert!(
        shapeless.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("missing field `cron`"),
        "{}",
        shapeless.body
    );
    let bad = api_add(r#"{"name": "api", "study": "mini", "cron": "@sometimes"}"#);
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(
        bad.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cron expression"),
        "{}",
        bad.body
    );
    let made = api_add(
        r#"{"name": "api", "study": "mini", "cron": "@daily", "from": "2026-12-01T00:00:00Z"}"#,
    );
    assert_eq!(made.status, 201, "{}", made.body);
    assert_eq!(made.json()["what"], "all");
    assert_eq!(made.json()["tz"], "UTC");
    assert_eq!(listed(a), ["api", "nightly", "weekdays"]);
    // Removed: from the page (the script asks first) and through the API.
    let page = http(a, "GET", "/schedules/weekdays", &[], b"").body;
    assert!(page.contains("data-confirm"), "{page}");
    let removed = http(a, "POST", "/schedules/weekdays/remove", &[FORM], b"");
    assert_eq!(removed.status, 303);
    assert_eq!(removed.header("location"), Some("/schedules"));
    assert_eq!(http(a, "GET", "/schedules/weekdays", &[], b"").status, 404);
    assert_eq!(
        http(a, "DELETE", "/api/schedules/api", &[], b"").status,
        204
    );
    assert_eq!(
        http(a, "DELETE", "/api/schedules/api", &[], b"").status,
        404
    );
    assert_eq!(listed(a), ["nightly"]);

    // Webhooks added and removed here. Refused with the reason — an https URL, a short secret,
    // no secret where the workbench has none of its own —, the URL kept in the form, the secret
    // never sent back, nothing stored; added, listed without its secret; the same URL again
    // refused; removed from the page (the script asks first) and through the API.
    let hook = |fields: &[(&str, &str)]| {
        http(
            a,
            "POST",
            "/schedules/nightly/webhooks",
            &[FORM],
            &form(fields),
        )
    };
    let secret = "a-secret-of-24-characters";
    let hooks = || http(a, "GET", "/api/schedules/nightly", &[], b"").json()["webhooks"].clone();
    for (url, given, why) in [
        (
            "https://receiver.example/hook",
            secret,
            "give an http:// URL",
        ),
        (
            "http://127.0.0.1:9/hook",
            "fifteen chars..",
            "at least 16 characters",
        ),
        (
            "http://127.0.0.1:9/hook",
            "",
            "give one (16 characters or more)",
        ),
    ] {
        let refused = hook(&[("url", url), ("secret", given)]);
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert!(refused.body.contains(why), "{why}: {}", refused.body);
        assert!(
            refused.body.contains(&format!(r#"value="{url}""#)),
            "{}",
            refused.body
        );
        assert!(given.is_empty() || !refused.body.contains(given));
    }
    assert_eq!(hooks(), serde_json::json!([]));
    let added = hook(&[("url", "http://127.0.0.1:9/hook"), ("secret", secret)]);
    assert_eq!(added.status, 303, "{}", added.body);
    assert_eq!(
        added.header("location"),
        Some("/schedules/nightly#add-webhook")
    );
    assert_eq!(hooks()[0]["url"], "http://127.0.0.1:9/hook");
    assert_eq!(hooks()[0]["enabled"], true);
    let page = http(a, "GET", "/schedules/nightly", &[], b"").body;
    assert!(!page.contains(secret), "{page}");
    assert!(
        page.contains("Remove the webhook http://127.0.0.1:9/hook?"),
        "{page}"
    );
    let again = hook(&[("url", "http://127.0.0.1:9/hook"), ("secret", secret)]);
    assert_eq!(again.status, 400, "{}", again.body);
    assert!(again.body.contains("already notifies"), "{}", again.body);
    let json = [("content-type", "application/json")];
    let api = http(
        a,
        "POST",
        "/api/schedules/nightly/webhooks",
        &json,
        format!(r#"{{"url": "http://127.0.0.1:9/api", "secret": "{secret}"}}"#).as_bytes(),
    );
    assert_eq!(api.status, 201, "{}", api.body);
    assert_eq!(api.json()["url"], "http://127.0.0.1:9/api");
    assert!(!api.body.contains(secret), "{}", api.body);
    let no_secret = http(
        a,
        "POST",
        "/api/schedules/nightly/webhooks",
        &json,
        br#"{"url": "http://127.0.0.1:9/other"}"#,
    );
    assert_eq!(no_secret.status, 400, "{}", no_secret.body);
    assert_eq!(no_secret.json()["error"]["class"], "bad_input");
    assert_eq!(
        http(
            a,
            "POST",
            "/schedules/nothing/webhooks",
            &[FORM],
            &form(&[("url", "http://127.0.0.1:9/x"), ("secret", secret)])
        )
        .status,
        404
    );
    let removed = http(
        a,
        "POST",
        "/schedules/nightly/webhooks/remove",
        &[FORM],
        &form(&[("url", "http://127.0.0.1:9/hook")]),
    );
    assert_eq!(removed.status, 303, "{}", removed.body);
    assert_eq!(
        http(
            a,
            "DELETE",
            "/api/schedules/nightly/webhooks?url=http%3A%2F%2F127.0.0.1%3A9%2Fapi",
            &[],
            b""
        )
        .status,
        204
    );
    assert_eq!(hooks(), serde_json::json!([]));
    // A workbench with a secret of its own signs with it when the form leaves it empty.
    let signed = Server::start(
        d,
        &["--workers", "0", "--schedule-every", "0"],
        &[("SHORTLIST_WEBHOOK_SECRET", secret)],
    );
    let page = http(&signed.addr, "GET", "/schedules/nightly", &[], b"").body;
    assert!(page.contains("left empty, the workbench's own"), "{page}");
    let added = http(
        &signed.addr,
        "POST",
        "/schedules/nightly/webhooks",
        &[FORM],
        &form(&[("url", "http://127.0.0.1:9/own"), ("secret", "")]),
    );
    assert_eq!(added.status, 303, "{}", added.body);
    assert_eq!(hooks()[0]["url"], "http://127.0.0.1:9/own");
}

/// A mistyped name — a study's, a candidate's — is answered with the stored names close to it:
/// links on the 404 page, `near` in the API's error document, the command line's "did you
/// mean"; a name close to nothing gets the plain 404.
#[test]
fn a_mistyped_name_is_answered_with_the_names_close_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = Server::start(d, &["--workers", "0", "--schedule-every", "0"], &[]);
    let a = server.addr.as_str();
    let text = study_text(d, "http://127.0.0.1:9#nothing");
    let created = http(
        a,
        "POST",
        "/api/studies",
        &[("content-type", "text/plain")],
        text.as_bytes(),
    );
    assert!(created.status < 300, "{}", created.body);

    let page = http(a, "GET", "/studies/mimi", &[], b"");
    assert_eq!(page.status, 404, "{}", page.body);
    assert!(
        page.body.contains(r#"<p class="near">Did you mean "#)
            && page.body.contains(r#"<a href="/studies/mini">mini</a>"#),
        "{}",
        page.body
    );
    let api = http(a, "GET", "/api/studies/Mini/status", &[], b"");
    assert_eq!(api.status, 404, "{}", api.body);
    let e = api.json();
    assert_eq!(
        (
            &e["error"]["status"],
            &e["error"]["class"],
            &e["error"]["near"]
        ),
        (
            &serde_json::json!(404),
            &serde_json::json!("bad_input"),
            &serde_json::json!(["mini"])
        ),
        "{e}"
    );
    // A case through the API (locked, not run yet: no answers stored), and a mistyped one.
    let lock = http(a, "POST", "/api/studies/mini/lock", &[], b"");
    assert!(lock.status < 300, "{}", lock.body);
    let case = http(a, "GET", "/api/studies/mini/cases/capital", &[], b"").json();
    assert_eq!(
        (&case["id"], &case["generation"]),
        (&serde_json::json!("capital"), &Value::Null),
        "{case}"
    );
    assert_eq!(case["answers"][0]["result"], Value::Null, "{case}");
    let typo = http(a, "GET", "/studies/mini/cases/captial", &[], b"");
    assert_eq!(typo.status, 404, "{}", typo.body);
    assert!(
        typo.body
            .contains(r#"<a href="/studies/mini/cases/capital">capital</a>"#),
        "{}",
        typo.body
    );
    // Far from every stored name: no offer.
    let far = http(a, "GET", "/api/studies/payroll", &[], b"").json();
    assert_eq!(far["error"]["near"], Value::Null, "{far}");
    let far = http(a, "GET", "/studies/payroll", &[], b"");
    assert_eq!(far.status, 404);
    assert!(!far.body.contains("Did you mean"), "{}", far.body);

    // The command line says the same.
    let url = format!("sqlite://{}?mode=rwc", d.join("web.db").display());
    let out = crate::support::shortlist()
        .env("DATABASE_URL", &url)
        .current_dir(d)
        .args(["study", "status", "mnii"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("did you mean `mini`?"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
